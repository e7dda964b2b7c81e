"""A phased job asks its parent for the GPU alone around each timing (evaluation/gpu_lock.py,
runner.PhaseChannel). Synth's rubric compiles for seconds and times for a fraction of one: holding
the GPU alone for the whole job queued every compile behind every other; now only timings queue.

The worker writes "x" and blocks until the parent answers, holding the GPU's lock exclusive; after
the timing it writes "s" (shared again). A trusted job (a task kernelsmith composed) also writes "n"
while torch.compile traces and generates code, which runs no GPU kernel: it then holds nothing, so a
job waiting for the GPU alone no longer waits for every compile in flight. Without the pipes (the CPU,
a job run by hand) all are no-ops. The pipes only change this job's own hold, so code that reaches them
(an LLM-written task) can make its own eager time unreliable or hold the GPU until its job's timeout,
nothing more."""

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


def _dynamo(args: tuple) -> bool:
    """Whether a compile callback is dynamo compiling a frame (not a lazy backward, an autotuning run or a
    CUDA graph being recorded: those run GPU work). Versions of torch without the argument only had that one."""
    trigger = getattr(args[0], "callback_trigger", None) if args else None
    return trigger is None or trigger.name == "DYNAMO"


def _let_go() -> None:
    """Hold nothing, once every kernel this job queued has finished (the weights just made, say)."""
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    _ask(b"n")


@contextlib.contextmanager
def unheld_while_compiling():
    """In the block, while dynamo traces and inductor generates and compiles code (no GPU kernel runs then),
    the job holds nothing; it holds the GPU shared again before the compiled code runs, and if the compile
    fails. Only for a job its parent lets do so (runner.PhaseChannel: a trusted job), and only outside
    alone(): a compile inside a timing would give the GPU away mid-timing."""
    if not _FDS:
        yield
        return
    from torch._dynamo.callback import callback_handler

    start = callback_handler.register_start_callback(lambda *args: _dynamo(args) and _let_go())
    end = callback_handler.register_end_callback(lambda *args: _dynamo(args) and _ask(b"s"))
    try:
        yield
    finally:
        callback_handler.remove_start_callback(start)
        callback_handler.remove_end_callback(end)
