"""The sandbox protocol: where builds and evaluations run.

Builds run on CPU workers, in parallel across cores. Evaluations (verify, profile) run on
GPU workers, exactly one job per GPU at a time, so timings never share a GPU. A worker that
crashes, hangs past its timeout or leaves its GPU in an error state is killed and replaced;
the job comes back as a failed result with the reason, and the caller never hangs.

The agent loop and the bench take a Sandbox; they do not know which kind it is.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from kernelsmith.evaluation import build_plan
from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.evaluation.result import EvalResult


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

    def warm_baselines(self, workdir: Path, opts: EvalOptions) -> Future:
        """At a session's start: its baselines measured on an evaluation slot, ahead of its first
        profile (evaluate.warm_workdir). Never raises; the future's dict says what happened."""
        ...

    def close(self) -> None: ...


RECENT_JOBS = 256  # busy intervals kept for stats()["recent"]


class JobLedger:
    """What a pool did, for stats(): jobs per kind, busy seconds per slot, recent intervals.

    Counters: done, failed, errors (harness or pool failures, also counted as failed) and any
    `extra` ones a pool keeps (the Ray pool counts replaced actors)."""

    def __init__(self, slot_labels: list[str], extra: tuple[str, ...] = ()):
        self.lock = threading.Lock()
        self.started = time.time()
        self.jobs = {kind: dict.fromkeys(("done", "failed", "errors", *extra), 0) for kind in ("build", "evaluate")}
        self.busy = dict.fromkeys(slot_labels, 0.0) | {"build": 0.0}
        self.recent: collections.deque[dict] = collections.deque(maxlen=RECENT_JOBS)

    def record(self, kind: str, label: str, start: float, ok: bool, error: bool) -> None:
        end = time.time()
        with self.lock:
            counts = self.jobs[kind]
            counts["done"] += 1
            counts["failed"] += not ok
            counts["errors"] += error
            self.busy[label] = self.busy.get(label, 0.0) + end - start
            self.recent.append({"slot": label, "kind": kind, "start": start, "end": end})

    def count(self, kind: str, counter: str) -> None:
        with self.lock:
            self.jobs[kind][counter] += 1

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"uptime_s": round(time.time() - self.started, 3),
                    "jobs": {kind: dict(counts) for kind, counts in self.jobs.items()},
                    "busy_s": {label: round(s, 3) for label, s in self.busy.items()},
                    "recent": list(self.recent)}


class Submitting:
    """Futures for callers that want parallelism (the bench), and `with` support, for a pool that
    keeps its thread pools in `self._executors` ({"build": ..., "evaluate": ...})."""

    def warm_baselines(self, workdir: Path, opts: EvalOptions) -> Future:
        """On a daemon thread (a session that ends first is not held up at exit; the trusted worker
        dies with this process), through the pool's own `_warm(workdir, opts)`."""
        future: Future = Future()

        def run() -> None:
            try:
                future.set_result(self._warm(Path(workdir), opts))
            except Exception as err:  # noqa: BLE001  (a warm-up that fails leaves the profile to measure)
                future.set_result({"ok": False, "error": f"{type(err).__name__}: {err}"})

        threading.Thread(target=run, name="ks-warm", daemon=True).start()
        return future

    def submit_build(self, kernels: Path, device: str, fast_math: bool = False) -> Future:
        return self._executors["build"].submit(self.build, kernels, device, fast_math)

    def submit_evaluate(self, workdir: Path | None = None, opts: EvalOptions | None = None, *,
                        reference: Path | None = None, candidate: Path | None = None) -> Future:
        """A workdir (evaluate_workdir), or reference= and candidate= (evaluate_files)."""
        opts = opts or EvalOptions(device=self.device)
        if workdir is not None:
            return self._executors["evaluate"].submit(self.evaluate_workdir, workdir, opts)
        if reference is None or candidate is None:
            raise ValueError("submit_evaluate needs a workdir, or both reference and candidate")
        return self._executors["evaluate"].submit(self.evaluate_files, reference, candidate, opts)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
        if not build_plan.has_kernels(self.workdir / "kernels"):  # inline kernels, say: nothing to build
            return self.sandbox.evaluate_workdir(self.workdir, replace(self.opts, profile=profile))
        built = self.compile()
        if not built.get("ok"):
            result = EvalResult(device=self.opts.device, precision=self.opts.precision, stage="build")
            result.build = {k: built.get(k) for k in ("ok", "cached", "seconds", "summary")}
            return result.reject("build failed:\n" + str(built.get("summary", "")), stage="build")
        return self.sandbox.evaluate_workdir(self.workdir, replace(self.opts, profile=profile))
