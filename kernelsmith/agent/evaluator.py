"""The Evaluator protocol behind the agent's compile / verify / profile tools, and the compact
text the model reads. The implementation is sandbox.base.SandboxEvaluator: every step runs in
harness worker processes of a sandbox; nothing here imports torch or candidate code.
"""

from __future__ import annotations

from typing import Any, Protocol

from kernelsmith.evaluation.result import EvalResult


class Evaluator(Protocol):
    def compile(self) -> dict[str, Any]: ...
    def verify(self) -> EvalResult: ...
    def profile(self) -> EvalResult: ...


def format_build(built: dict[str, Any]) -> str:
    if built.get("ok"):
        return f"build ok{' (cache hit)' if built.get('cached') else ''} in {built.get('seconds', 0):.1f} s"
    return "build FAILED:\n" + str(built.get("summary") or built.get("log", ""))[-4000:]


def _ms(value) -> str:
    return "-" if value is None else f"{value:.4f} ms"


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_eval(result: EvalResult, tool: str) -> str:
    """A few lines: the verdict first, then why or the numbers."""
    if not result.clean:
        lines = [f"REJECTED at {result.stage or tool} (reward {result.reward:g})", result.error]
        lines += [f"violation: {v}" for v in result.violations if v not in result.error]
        return "\n".join(line for line in lines if line)
    errs = [t["max_abs_err"] for t in result.trials if t.get("max_abs_err") is not None]
    stressed = sum(1 for t in result.trials if t.get("stress"))
    lines = [f"CORRECT ({len(result.trials) - stressed} trials on fresh inputs and weights"
             + (f", {stressed} on stressed inputs" if stressed else "")
             + (f", max abs err {max(errs):.2g})" if errs else ")")]
    if result.timings_ms:
        t = result.timings_ms
        lines.append(f"candidate {_ms(t.get('candidate'))} | eager {_ms(t.get('eager'))} | "
                     f"compile {_ms(t.get('compile'))}" + (f" ({result.compile_mode})" if result.compile_mode else ""))
        lines.append(f"speed-up {_x(result.speedup_vs_eager)} vs eager, {_x(result.speedup_vs_compile)} vs "
                     f"compile; reward {result.reward:g}")
        if result.contended:
            lines.append(f"not credited as faster: {result.contended}")
        roof = result.roofline or {}
        if roof.get("pct_of_bandwidth") is not None:
            lines.append(f"roofline: {roof['pct_of_bandwidth']:.0f}% of memory bandwidth, "
                         f"{roof['pct_of_flops']:.0f}% of FLOP/s ({roof['bound']}-bound)")
    return "\n".join(lines)
