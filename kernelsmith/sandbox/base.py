"""The sandbox protocol: where builds and evaluations run.

Builds run on CPU workers, in parallel across cores. Evaluations (verify, profile) run on
GPU workers, exactly one job per GPU at a time, so timings never share a GPU. A worker that
crashes, hangs past its timeout or leaves its GPU in an error state is killed and replaced;
the job comes back as a failed result with the reason, and the caller never hangs.

The agent loop and the bench take a Sandbox; they do not know which kind it is.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from kernelsmith.evaluate import EvalOptions
from kernelsmith.harness.result import EvalResult


class Sandbox(Protocol):
    kind: str  # "local" or "ray"

    def build(self, kernels: Path, device: str, fast_math: bool = False) -> dict[str, Any]:
        """Build a kernels/ folder on a CPU worker; the build dict of evaluate.run_build."""
        ...

    def evaluate_workdir(self, workdir: Path, opts: EvalOptions) -> EvalResult:
        """Build, verify and (when opts.profile) profile a workdir on one exclusive GPU worker."""
        ...

    def evaluate_files(self, reference: Path, candidate: Path, opts: EvalOptions) -> EvalResult:
        """Score any ModelNew file against a reference (bench --eval-only)."""
        ...

    def close(self) -> None: ...


class SandboxEvaluator:
    """The agent's Evaluator (compile / verify / profile) on top of a sandbox."""

    def __init__(self, sandbox: Sandbox, workdir: Path, opts: EvalOptions):
        self.sandbox, self.workdir, self.opts = sandbox, Path(workdir), opts

    def compile(self) -> dict[str, Any]:
        return self.sandbox.build(self.workdir / "kernels", self.opts.device, self.opts.fast_math)

    def verify(self) -> EvalResult:
        return self._evaluate(profile=False)

    def profile(self) -> EvalResult:
        return self._evaluate(profile=True)

    def _evaluate(self, profile: bool) -> EvalResult:
        # Build on a CPU worker first, so the GPU worker's build is a cache hit and the GPU is
        # not held while nvcc runs.
        if not (self.workdir / "kernels").is_dir():  # e.g. a candidate with inline kernels: nothing to build
            return self.sandbox.evaluate_workdir(self.workdir, replace(self.opts, profile=profile))
        built = self.compile()
        if not built.get("ok"):
            result = EvalResult(device=self.opts.device, precision=self.opts.precision, stage="build")
            result.build = {k: built.get(k) for k in ("ok", "cached", "seconds", "summary")}
            return result.reject("build failed:\n" + str(built.get("summary", "")), stage="build")
        return self.sandbox.evaluate_workdir(self.workdir, replace(self.opts, profile=profile))
