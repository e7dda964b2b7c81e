"""Who may use a GPU together: a readers-writer lock per GPU, across threads and processes.

The parent holds it from sending a job to its worker's exit (runner.Prestarted.run). A worker runs no
candidate code before its job arrives, and nothing it started outlives it (its PID namespace ends),
so every GPU kernel of every job lies inside its hold.

- Exclusive: every job that times anything (the profile, the baselines) and every kind not named
  below. While one holds a GPU, no other job of any kind runs on it: no candidate
  code runs while a profile or a baseline times.
- Shared: the jobs that only compute and compare (SHARED_JOBS): verify's candidate and judge, the
  profile's checksums, a task's lint. They time nothing that is judged, and nothing of one can reach
  another (separate processes, CUDA contexts and jails), so they may overlap each other; a pool's
  lanes verify side by side instead of queueing behind each other's verifies.
- A fair queue: every holder first takes the GPU's gate, then the lock in its mode, then lets the
  gate go. The one waiting for the lock holds the gate, so a waiting profile keeps new verifies out
  until the verifies already in have left (flock alone prefers no one, and a stream of overlapping
  shared holds would starve it), and a waiting verify keeps the next profile behind it.

- Phased: a job that mostly computes and times only briefly (synth's rubric: seconds of torch.compile,
  a fraction of a second of timing) starts shared and asks its parent, over a pipe, for the GPU alone
  around each timing (harness/gpu_phase.py, runner.PhaseChannel); the parent lets the shared hold go,
  then takes the lock exclusive through the gate, and back. While it waits between the two it holds
  nothing and runs nothing (it is blocked on the pipe). So rubric jobs compile side by side and only
  their timings queue, instead of each holding the GPU for its whole compile. A trusted one (a task
  kernelsmith composed) holds nothing at all while torch.compile generates code, which runs no GPU
  kernel (runner.PhaseChannel): otherwise a job asking for the GPU alone waits for every compile in flight.

KERNELSMITH_GPU_SHARING=exclusive makes every job exclusive (one job per GPU, as before), for a side
by side measurement or a GPU whose memory the lanes' verifies would not fit in together. The lock
files live where no jail can see them, and the parent reads the setting from its own environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from pathlib import Path

SHARED_JOBS = frozenset({"candidate", "judge", "checksums", "lint"})  # untimed: may share a GPU
PHASED_JOBS = frozenset({"rubric"})  # shared, exclusive around their timings (Switchable)


def sharing() -> bool:
    return os.environ.get("KERNELSMITH_GPU_SHARING", "shared") != "exclusive"


def shared(kind: str) -> bool:
    """Whether a job of this kind may hold its GPU with others (never a kind that times)."""
    return kind in SHARED_JOBS and sharing()


def phased(job: dict) -> bool:
    """Whether this job holds its GPU shared and asks for it alone around its timings (a job marked
    "alone" has it alone throughout: a rubric retried after running out of memory beside others)."""
    return job["kind"] in PHASED_JOBS and sharing() and not job.get("alone")


def folder() -> Path:
    path = Path(os.environ.get("KERNELSMITH_COMPUTE_LOCK_DIR", "/tmp/kernelsmith-compute"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def hold(keys: list[str], share: bool):
    """Each GPU of `keys` (sorted, so no two holders deadlock) in its turn: shared or exclusive."""
    where = folder()
    with contextlib.ExitStack() as held:
        for key in sorted(keys):
            name = key.replace("/", "_")
            lock = held.enter_context(open(where / f"gpu-{name}.lock", "w"))
            with open(where / f"gpu-{name}.gate", "w") as gate:
                fcntl.flock(gate, fcntl.LOCK_EX)  # blocking: the holder's own timeout bounds the wait
                fcntl.flock(lock, fcntl.LOCK_SH if share else fcntl.LOCK_EX)
            held.callback(fcntl.flock, lock, fcntl.LOCK_UN)  # (closing the gate let it go)
        yield


class Switchable:
    """A hold of `keys` whose mode changes: the old hold let go, then the new one taken through the gate,
    so an upgrade never deadlocks with another holder waiting to upgrade too."""

    def __init__(self, keys: list[str]):
        self.keys, self._held = keys, None

    def take(self, share: bool) -> None:
        self.release()
        held = contextlib.ExitStack()
        held.enter_context(hold(self.keys, share))
        self._held = held

    def release(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None


def gpu_keys(visible: str | None) -> list[str]:
    """The GPUs a worker with this CUDA_VISIBLE_DEVICES can use, by UUID where nvidia-smi names them, so
    that every spelling of one GPU (its index, its UUID or a prefix of it, no CUDA_VISIBLE_DEVICES at all)
    takes the same lock. Without nvidia-smi, the spelling itself ("all" when unset)."""
    table = _gpu_table()
    if not table:
        return [visible if visible is not None else "all"]
    if visible is None:
        return sorted(uuid for _, uuid in table)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    keys = {next((uuid for index, uuid in table if e == index or uuid.startswith(e)), e) for e in entries}
    return sorted(keys) or ["none"]


_GPUS: list | None = None


def _gpu_table() -> list[tuple[str, str]]:
    """(index, UUID) of every GPU nvidia-smi lists, read once per process; [] without nvidia-smi."""
    global _GPUS
    if _GPUS is None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _GPUS = [tuple(part.strip() for part in line.split(",", 1)) for line in out.splitlines() if "," in line]
    return _GPUS
