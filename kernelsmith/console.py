"""Rich rendering for the terminal (results of compile, verify, profile, eval, doctor)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kernelsmith.harness.result import EvalResult

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def _fmt_ms(value) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.1f} µs" if value < 1 else f"{value:.3f} ms"


def _fmt_x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render_eval(result: EvalResult, title: str = "evaluation") -> None:
    verdict = "[green]correct[/]" if result.clean else "[red]rejected[/]"
    console.print(f"[bold]{title}[/]: {verdict}  reward [bold]{result.reward:g}[/]  "
                  f"({result.device}, {result.precision}{', ' + result.gpu if result.gpu else ''})")
    if result.error:
        console.print(f"[red]{result.error}[/]")
    for violation in result.violations:
        if violation != result.error.removeprefix("rejected: ").removeprefix("rejected while profiling: "):
            console.print(f"[red]violation:[/] {violation}")
    if result.trials:
        errs = [t.get("max_abs_err") for t in result.trials if t.get("max_abs_err") is not None]
        if errs:
            console.print(f"{len(result.trials)} trials, max abs error {max(errs):.3g}")
    if result.timings_ms:
        render_timings(result)
    for note in result.notes:
        if note and len(note) < 300:
            console.print(f"[dim]{note}[/]")


def render_timings(result: EvalResult) -> None:
    table = Table(title="timings (median of CUDA-event or host-clock runs, L2 flushed)", title_justify="left")
    for col in ("", "median", "p10 - p90", "speed-up"):
        table.add_column(col, justify="right" if col else "left")
    cand = result.timings_ms.get("candidate")
    for name, ms in result.timings_ms.items():
        if name == "compile":
            continue
        spread = result.spread_ms.get(name)
        speed = None if name == "candidate" or not cand else ms / cand
        table.add_row(name, _fmt_ms(ms), f"{_fmt_ms(spread[0])} - {_fmt_ms(spread[1])}" if spread else "",
                      _fmt_x(speed) if speed else "")
    console.print(table)
    console.print(f"speed-up vs eager [bold]{_fmt_x(result.speedup_vs_eager)}[/], vs torch.compile "
                  f"[bold]{_fmt_x(result.speedup_vs_compile)}[/]"
                  + (f" (best mode: {result.compile_mode})" if result.compile_mode else ""))
    roof = result.roofline
    if roof.get("pct_of_bandwidth") is not None:
        console.print(f"roofline: {roof['min_bytes'] / 1e6:.1f} MB, {roof['flops'] / 1e9:.2f} GFLOP; "
                      f"{roof['pct_of_bandwidth']:.1f}% of bandwidth, {roof['pct_of_flops']:.1f}% of FLOP/s "
                      f"({roof['bound']}-bound, floor {_fmt_ms(roof['floor_ms'])})")
