"""A phased job asks its parent for the GPU alone around each timing (evaluation/gpu_lock.py,
runner.PhaseChannel). Synth's rubric compiles for seconds and times for a fraction of one: holding
the GPU alone for the whole job queued every compile behind every other; now only timings queue.

The worker writes "x" and blocks until the parent answers, holding the GPU's lock exclusive; after
the timing it writes "s" (shared again). Without the pipes (the CPU, a job run by hand) both are
no-ops. The pipes only change this job's own hold, so code that reaches them (an LLM-written task)
can make its own eager time unreliable or hold the GPU until its job's timeout, nothing more."""

from __future__ import annotations

import contextlib
import os

_FDS: tuple[int, ...] = ()


def claim() -> None:
    """Take the pipes from the environment once, before any task code runs in the worker."""
    global _FDS
    spec = os.environ.pop("KERNELSMITH_PHASE_FDS", "")
    if spec:
        _FDS = tuple(int(fd) for fd in spec.split(","))


def phased() -> bool:
    """Whether this job shares its GPU and has it alone only when it asks (its parent gave it the pipes)."""
    return bool(_FDS)


def _ask(mode: bytes) -> None:
    if not _FDS:
        return
    os.write(_FDS[0], mode)
    if os.read(_FDS[1], 1) != b"k":
        raise RuntimeError("the parent did not answer a request for the GPU's lock")


@contextlib.contextmanager
def alone():
    """The block runs while no other job uses this GPU."""
    _ask(b"x")
    try:
        yield
    finally:
        _ask(b"s")
