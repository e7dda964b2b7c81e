"""LocalSandbox: builds and evaluations on this machine, with one evaluation per GPU at a time.

Slots. Builds hold one of `build_workers` build slots (a semaphore): nvcc and g++ run on CPU
cores, several at once. Evaluations take one evaluation slot from a queue: one slot per GPU,
so exactly one evaluation uses a GPU at a time and timings never share it. With evals_per_gpu=K
a GPU has K slots, and K evaluations overlap there: in starting workers and importing torch, and in
their verifies, which share the GPU; a profile or a baseline has it alone (evaluation/gpu_lock.py). A GPU slot pins
its GPU for the workers of that evaluation with CUDA_VISIBLE_DEVICES (runner.extra_env, which
is per thread, so concurrent evaluations in other threads keep their own GPU). On the CPU
device without `gpus` there is one unpinned slot.

Failures. There is no pool of long-lived workers to repair: every step of every job runs in
a fresh worker process in its own process group (evaluation/runner.py). A worker that crashes,
is killed or hangs past its timeout is killed with everything it started, and its step comes
back as a failed result with the reason; the next job starts new workers, so a broken CUDA
context dies with its process. Anything else that goes wrong inside the harness becomes a
rejected EvalResult (stage "sandbox") or a failed build dict; the caller never gets an
exception and the slot is always given back.

Parallelism. The blocking methods run in the caller's thread. submit_build / submit_evaluate
return futures from two internal thread pools (one sized to the build slots, one to the
evaluation slots), so queued evaluations never starve builds of threads.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from kernelsmith.evaluation import evaluate
from kernelsmith.evaluation.options import EvalOptions
from kernelsmith.evaluation import runner
from kernelsmith.evaluation.result import EvalResult
from kernelsmith.sandbox.base import JobLedger, Submitting

@dataclass(frozen=True)
class Slot:
    """One evaluation slot: a GPU (env pins it) or the CPU (no env)."""

    label: str  # "gpu 0" or "cpu"; shows in result.notes and stats
    env: dict[str, str] = field(default_factory=dict)


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES entries, without importing torch.

    CUDA_VISIBLE_DEVICES wins when set (nvidia-smi ignores it); CUDA stops at the first
    negative entry, so "-1" means none. Otherwise `nvidia-smi -L` lists them.
    """
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(_nvidia_smi_count())]
    entries = []
    for entry in (e.strip() for e in value.split(",")):
        if not entry or entry.startswith("-"):
            break
        entries.append(entry)
    return entries


def _nvidia_smi_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def gpu_slots(gpus: list[int] | None) -> list[Slot]:
    """Slots for the given GPU indices (as this process numbers them), else for every visible GPU.

    Under CUDA_VISIBLE_DEVICES="5,7", index 0 is GPU 5: the worker's variable must name the
    physical entry, because it replaces the parent's.
    """
    if gpus is None:
        return [Slot(f"gpu {i}", {"CUDA_VISIBLE_DEVICES": entry}) for i, entry in enumerate(visible_gpus())]
    if os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        return [Slot(f"gpu {g}", {"CUDA_VISIBLE_DEVICES": str(g)}) for g in gpus]
    visible = visible_gpus()
    for g in gpus:
        if not 0 <= g < len(visible):
            raise ValueError(f"GPU {g} is not visible: CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} "
                             f"leaves {len(visible)} GPU(s)")
    return [Slot(f"gpu {g}", {"CUDA_VISIBLE_DEVICES": visible[g]}) for g in gpus]


class LocalSandbox(Submitting):
    kind = "local"

    def __init__(self, device: str, gpus: list[int] | None = None, build_workers: int | None = None,
                 evals_per_gpu: int = 1):
        self.device = device
        # device "cpu" with gpus: one pinned slot per entry (splits CPU evaluations; tests the pinning)
        self.slots = gpu_slots(gpus) if device == "cuda" or gpus is not None else [Slot("cpu")]
        if device == "cuda" and evals_per_gpu > 1:  # verifies overlap, a profile has the GPU alone (gpu_lock.py)
            self.slots = [replace(slot, label=f"{slot.label}.{k}") for slot in self.slots for k in range(evals_per_gpu)]
        if not self.slots:
            raise RuntimeError("no visible GPU for the local sandbox (nvidia-smi -L lists none, "
                               "or CUDA_VISIBLE_DEVICES hides them); pass gpus=[...] or use device 'cpu'")
        self.build_workers = build_workers or max(1, (os.cpu_count() or 2) // 2)
        self._free: queue.Queue[int] = queue.Queue()
        for index in range(len(self.slots)):
            self._free.put(index)
        self._builds = threading.Semaphore(self.build_workers)
        self._executors = {"build": ThreadPoolExecutor(self.build_workers, thread_name_prefix="ks-build"),
                           "evaluate": ThreadPoolExecutor(len(self.slots), thread_name_prefix="ks-eval")}
        self._ledger = JobLedger([slot.label for slot in self.slots])

    # --- the Sandbox protocol ----------------------------------------------------------------

    def build(self, kernels: Path, device: str, fast_math: bool = False) -> dict[str, Any]:
        """Build kernels/ on a build slot; the dict of evaluate.run_build (ok False with a summary on failure)."""
        with self._builds:
            start = time.time()
            try:
                # on a GPU the next edit's build worker is started now (on the CPU it would take cores from timed runs)
                built = evaluate.run_build(Path(kernels), device, fast_math, spare=device == "cuda")
                error = False
            except Exception as err:  # noqa: BLE001  (the caller gets a failed build, never a raise)
                built = {"ok": False, "cached": False, "seconds": 0.0, "log": "",
                         "summary": f"sandbox error: {type(err).__name__}: {err}"}
                error = True
            self._ledger.record("build", "build", start, bool(built.get("ok")), error)
        return built

    def evaluate_workdir(self, workdir: Path, opts: EvalOptions) -> EvalResult:
        """Build, verify and (when opts.profile) profile a workdir on one exclusive evaluation slot."""
        return self._on_slot(lambda: evaluate.evaluate_workdir(Path(workdir), opts), opts)

    def evaluate_files(self, reference: Path, candidate: Path, opts: EvalOptions) -> EvalResult:
        """Score any ModelNew file against a reference on one exclusive evaluation slot."""
        return self._on_slot(lambda: evaluate.evaluate(Path(reference), Path(candidate), opts), opts)

    def _warm(self, workdir: Path, opts: EvalOptions) -> dict:
        if opts.spare_workers:  # from a build thread: a jailed worker dies with the thread that started it
            self._executors["build"].submit(evaluate.stock_build, Path(workdir) / "kernels", opts.device,
                                            opts.fast_math).result()  # (bwrap --die-with-parent), and this one ends
        with self._slot():  # like any evaluation: no candidate shares the GPU with it
            return evaluate.warm_workdir(workdir, opts)

    def close(self) -> None:
        """Cancel queued submissions and wait for running ones (their workers have timeouts)."""
        for pool in self._executors.values():
            pool.shutdown(wait=True, cancel_futures=True)

    # --- accounting ---------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Jobs done/failed/errors per kind ("errors": harness exceptions, also counted as failed),
        busy seconds per slot ("build" sums the build slots), uptime, and the latest busy intervals
        (epoch seconds) as {"slot", "kind", "start", "end"}."""
        return {"kind": self.kind, "device": self.device, "slots": [s.label for s in self.slots],
                "build_workers": self.build_workers, **self._ledger.snapshot()}

    # --- internals ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _slot(self):
        """An evaluation slot, with its GPU pinned for the workers started inside; blocks until one is
        free (one evaluation per GPU), and goes back also on KeyboardInterrupt."""
        index = self._free.get()
        try:
            with runner.extra_env(self.slots[index].env):
                yield self.slots[index]
        finally:
            self._free.put(index)

    def _on_slot(self, job: Callable[[], EvalResult], opts: EvalOptions) -> EvalResult:
        with self._slot() as slot:
            start, result, error = time.time(), None, False
            try:
                result = job()
            except Exception as err:  # noqa: BLE001  (a rejected result, never an exception to the caller)
                result, error = _sandbox_failure(err, opts), True
            finally:
                self._ledger.record("evaluate", slot.label, start, result is not None and result.clean, error)
        result.notes.append(f"sandbox: local {slot.label}")
        return result


def _sandbox_failure(err: Exception, opts: EvalOptions) -> EvalResult:
    result = EvalResult(device=opts.device, precision=opts.precision)
    return result.reject(f"sandbox error: {type(err).__name__}: {err}", stage="sandbox")
