"""The rubric, parent side: each task is checked by a "rubric" job in a fresh, jailed worker
(kernelsmith/harness/synth_rubric.py), up to `workers` at a time. On cuda the jobs are spread over the
visible GPUs the way the local sandbox pins them. Jobs that share a GPU compile side by side and
take turns only to time (gpu_lock.PHASED_JOBS), so eager times are never measured side by side."""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import threading
import time
from pathlib import Path

from kernelsmith.evaluation import gpu_lock, runner

WINDOWS_MS = {"cuda": (1.0, 100.0), "cpu": (0.05, 50.0)}
TIMEOUT_S = 600.0  # torch.compile of a large graph on a busy machine takes minutes


def inductor_cache_dir() -> Path:
    """Where the rubric's torch.compile keeps its kernels between jobs and runs (combinatorial tasks only)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "kernelsmith" / "synth-inductor"
    path.mkdir(parents=True, exist_ok=True)
    return path


def rubric_job(path: Path, device: str, window_ms: tuple[float, float], threads: int, trusted: bool) -> dict:
    job = {"kind": "rubric", "reference": str(path.resolve()), "cwd": str(path.resolve().parent),
           "device": device, "window_ms": list(window_ms), "threads": threads}
    if trusted:  # a task an LLM wrote could leave compiled code there for the next job to load
        job["out_dir"] = job["inductor_cache"] = str(inductor_cache_dir())  # out_dir: writable in the jail
        job["compile_unheld"] = True  # and could give its GPU hold away (runner.PhaseChannel)
    return job


def failed_job(err: runner.JobFailed) -> dict:
    """A worker that crashed, hung or raised outside the stages: a rejection at stage "run"."""
    return {"accepted": False, "stage": "run", "reason": err.reason.splitlines()[0][:400], "checks": {},
            "eager_ms": None, "compile_ms": None, "stage_s": {}}


# What a job may fail with because of the other jobs on its GPU, not of its task: out of memory, or no CUDA
# context for it at all (cudaErrorDevicesUnavailable, "busy or unavailable": 3 tasks of an H100 run were
# rejected so within 0.6 s, while another job overran its plan and filled the GPU)
SHARED_GPU_FAULTS = ("out of memory", "busy or unavailable")


def shared_gpu_fault(verdict: dict) -> bool:
    reason = (verdict["reason"] or "").lower()
    return not verdict["accepted"] and any(fault in reason for fault in SHARED_GPU_FAULTS)


def run_rubric(job: dict, timeout: float = TIMEOUT_S, spares: int = 0, fresh: bool = False) -> dict:
    """The job's verdict, run by a spare worker of its folder when one waits (and `spares` more started for
    the next jobs: on the GPU a jailed worker's imports took 7 s of each task's 20 s), else (or `fresh`)
    by a worker started for it."""
    generic = {**job, "reference": job["cwd"]}  # a spare of the folder serves any task in it
    try:
        spare = None if fresh else runner.SPARES.take(generic, timeout)
        with spare or runner.Prestarted(generic, timeout) as worker:
            if spares:
                runner.SPARES.stock(generic, timeout, depth=spares)
            verdict = worker.run({"reference": job["reference"]})
            return {**verdict, "waits": _waits(worker, spare is not None)}
    except runner.JobFailed as err:
        return failed_job(err)


def _waits(worker: runner.Prestarted, spare: bool) -> dict:
    """Where a job's time went outside its stages (informational): whether a spare served it, the wait for its
    worker's imports, and its GPU lock's waits and holds (runner.Prestarted.gpu_lock)."""
    return {"spare": spare, "ready_wait": worker.ready_wait_s, **worker.gpu_lock}


WAIT_SECONDS = ("memory", "ready_wait", "lock_wait")  # the waits that are seconds (beside `need`, `spare`)


def _summed(first: dict, again: dict, key: str, only: tuple[str, ...] | None = None) -> dict:
    """The seconds of both attempts of a retried job under `key` (stage_s, or `only` those of waits), so that
    the run's time table counts the first attempt's too."""
    parts = [first.get(key) or {}, again.get(key) or {}]
    names = {name for part in parts for name, value in part.items()
             if isinstance(value, (int, float)) and (only is None or name in only)}
    return {name: round(sum(part.get(name) or 0.0 for part in parts), 4) for name in names}


def capture_graphs(folder: Path, timeout: float = TIMEOUT_S) -> dict:
    """Every task's operator graph under folder, captured in one jailed worker."""
    job = {"kind": "opgraph", "folder": str(folder.resolve()), "cwd": str(folder.resolve()), "device": "cpu"}
    return runner.run_job(job, timeout)


def capture_graph(path: Path, timeout: float = TIMEOUT_S) -> dict:
    """One task's operator graph, captured in a jailed worker (the task may be an LLM's)."""
    job = {"kind": "opgraph", "reference": str(path.resolve()), "cwd": str(path.resolve().parent), "device": "cpu"}
    return runner.run_job(job, timeout)


# What a rubric job holds on its GPU: its forward's values twice (the eager outputs kept while the next
# checks and the compiled model run) as float32, the largest operator's own scratch (attention's scores:
# rows with attention peaked at up to 3.1x a plan without them), and its CUDA context and allocator slack.
# 8-10 jobs that ignored each other's memory on an H100 ran 52 of 259 candidates out of it.
CONTEXT_BYTES = 1 << 30
GPU_SHARE = 0.7  # of the GPU's memory the rubric jobs of one GPU may plan to use together


def memory_need(graph) -> int | None:
    """Bytes a combinatorial task's rubric job may hold on the GPU; None (all of the budget) for an LLM's."""
    return None if graph is None else 4 * (2 * graph.elements() + graph.scratch()) + CONTEXT_BYTES


OVERTAKE = 8  # how many later jobs may start ahead of a waiting one (in room it could not use yet) before none may


class MemoryBudget:
    """The GPU memory of one GPU's rubric jobs: a job starts once the others' needs leave room for its own,
    or when it is the only one (a need larger than the budget, or unknown, runs alone in it).

    A later job that fits in the room left may start ahead of earlier ones still waiting for more room (on an
    H100, first come, first in left 16.5 s of a candidate's 27.6 s to this wait, median of 85: each large job
    at the head held back every small one behind it). Each earlier job counts the jobs that went ahead of it,
    and once one has been passed `overtake` times none may pass it: a large job waits for at most that many
    small ones, then for the room they free."""

    def __init__(self, capacity: int | None, overtake: int = OVERTAKE):
        self.capacity, self.used, self.overtake, self.stopped = capacity, 0, overtake, False
        self._waiting: list[_Waiter] = []  # in arrival order
        self._turn = threading.Condition()

    @contextlib.contextmanager
    def held(self, need: int | None):
        if self.capacity is None:  # the CPU, or a GPU whose memory nvidia-smi does not say
            yield
            return
        need = self.capacity if need is None else min(need, self.capacity)
        with self._turn:
            ticket = _Waiter()
            self._waiting.append(ticket)
            self._turn.wait_for(lambda: self.stopped or self._may_start(ticket, need))
            if self.stopped:
                self._waiting.remove(ticket)
                raise Stopped("the run was stopped while this job waited for GPU memory")
            ahead = self._ahead_of(ticket)
            for earlier in ahead:
                earlier.passed += 1
            self._waiting.remove(ticket)
            self.used += need
            self._turn.notify_all()
        try:
            yield
        finally:
            with self._turn:
                self.used -= need
                self._turn.notify_all()

    def stop(self) -> None:
        """No waiting job starts: each raises Stopped (an interrupted run drops the rows it has not written)."""
        with self._turn:
            self.stopped = True
            self._turn.notify_all()

    def _may_start(self, ticket: "_Waiter", need: int) -> bool:
        """It fits, and every job ahead of it may still be passed."""
        if self.used + need > self.capacity:
            return False
        return all(earlier.passed < self.overtake for earlier in self._ahead_of(ticket))

    def _ahead_of(self, ticket: "_Waiter") -> list["_Waiter"]:
        return self._waiting[:next(i for i, w in enumerate(self._waiting) if w is ticket)]


class Stopped(Exception):
    """A job that never started: its run was stopped."""


class _Waiter:
    """A job waiting for room (compared by identity), and how many later jobs have started ahead of it."""

    def __init__(self):
        self.passed = 0


def _nvidia_smi(field: str) -> list[str]:
    """One line per GPU of `nvidia-smi --query-gpu=field`, or [] without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def gpu_memory_bytes() -> int | None:
    """The smallest total memory of this machine's GPUs by nvidia-smi, or None."""
    mib = [int(line) for line in _nvidia_smi("memory.total") if line.isdigit()]
    return min(mib) << 20 if mib else None


def gpu_names() -> str | None:
    """The GPUs a run used, by name ("NVIDIA H100 80GB HBM3"), or None."""
    names = sorted(set(_nvidia_smi("name")))
    return ", ".join(names) or None


class RubricPool:
    """What every rubric job of a run shares: the device, the window, the threads per job and the GPUs
    to spread jobs over. check() blocks; the driver calls it from up to `workers` threads."""

    def __init__(self, device: str, workers: int, window_ms: tuple[float, float]):
        self.device, self.window_ms = device, window_ms
        self.threads = max(1, (os.cpu_count() or 1) // workers)  # eager's intra-op threads per job
        envs = self._gpu_envs()
        self._slots = itertools.cycle(envs)
        # spares on the GPU only (on the CPU their imports would take the cores eager is timed on), as
        # many per GPU as jobs run there at a time
        self.spares = -(-workers // len(envs)) if device == "cuda" else 0
        memory = gpu_memory_bytes() if device == "cuda" else None
        capacity = int(memory * GPU_SHARE) if memory else None
        self._budgets = {env.get("CUDA_VISIBLE_DEVICES"): MemoryBudget(capacity) for env in envs}
        self._lock = threading.Lock()

    def _gpu_envs(self) -> list[dict]:
        if self.device != "cuda":
            return [{}]
        from kernelsmith.sandbox.local import gpu_slots

        return [slot.env for slot in gpu_slots(None)] or [{}]

    def stop(self) -> None:
        """Stop the run's jobs: none starts any more, and the running ones' workers are killed."""
        for budget in self._budgets.values():
            budget.stop()
        runner.stop_all()

    def check(self, path: Path, trusted: bool, need: int | None = None) -> dict:
        """The rubric's verdict on one task; `need`: the bytes its job may hold on the GPU (memory_need)."""
        with self._lock:
            env = next(self._slots)
        budget = self._budgets[env.get("CUDA_VISIBLE_DEVICES")]
        job = rubric_job(path, self.device, self.window_ms, self.threads, trusted)
        with runner.extra_env(env):
            verdict = self._run(budget, need, job, spares=self.spares)
            if self.device != "cuda" or not shared_gpu_fault(verdict) or not gpu_lock.phased(job):
                return verdict
            # beside other jobs' tensors (52 of 259 candidates on an H100): the task's own fault only alone, with
            # the GPU to itself and the whole budget, so that no other job's tensors wait beside it either (19
            # of those 52 ran out of memory again when only the compute was its own: 2026-12-06)
            retry = self._run(budget, None, {**job, "alone": True}, fresh=True)
            return {**retry, "retried_alone": verdict["reason"], "stage_s": _summed(verdict, retry, "stage_s"),
                    "waits": {**retry["waits"], **_summed(verdict, retry, "waits", WAIT_SECONDS)}}

    @staticmethod
    def _run(budget: MemoryBudget, need: int | None, job: dict, **how) -> dict:
        """run_rubric inside the budget's room for `need`, with the waits outside its stages."""
        asked = time.perf_counter()
        with budget.held(need):
            memory_wait = round(time.perf_counter() - asked, 3)
            verdict = run_rubric(job, **how)
        return {**verdict, "waits": {"memory": memory_wait, "need": need, **verdict.get("waits", {})}}
