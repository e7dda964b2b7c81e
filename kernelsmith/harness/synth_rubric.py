"""The rubric, worker side (the "rubric" job, run jailed: an LLM-written task is untrusted code).
On cuda the job shares its GPU with other rubric jobs and has it alone only while it times
(harness/gpu_phase.py).

Stages, cheapest first, the first failure ends the job: load, eager, finite, deterministic,
trivial (near zero or constant), dependence (each input, and the weights), timing (eager within
the window), compile (torch.compile(fullgraph=True) runs and agrees with eager). A task that
graph-breaks is rejected at compile: it gives a fusing compiler no single graph to work on.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch

from kernelsmith.harness import gpu_phase, guards, loading

NEAR_ZERO = 1e-6
WEIGHTS, INPUTS, OTHER_INPUTS, OTHER_WEIGHTS = 1, 2, 3, 4


class Rejected(Exception):
    def __init__(self, stage: str, reason: str):
        super().__init__(reason)
        self.stage, self.reason = stage, reason


def _outputs(model, inputs: list) -> list[torch.Tensor]:
    with torch.no_grad():
        return [o.detach() for o in guards.flatten_outputs(model(*inputs))]


def _run(task, device: str, weights: int = WEIGHTS, inputs: list | None = None, forward_seed: int = 11) -> list:
    model = loading.seeded_reference(task, weights, device, "fp32")
    inputs = loading.seeded_inputs(task, INPUTS, device, "fp32") if inputs is None else inputs
    torch.manual_seed(forward_seed)  # randomness inside forward must show up as non-determinism
    return _outputs(model, inputs)


# The checks compare and reduce in slices of this many elements: whole-tensor float64 copies of a 4 GB output
# (and allclose's temporaries beside them) put a job's peak at 2.5-6.5x the bytes its plan reserved
# (rubric.memory_need; an H100 run's rows, peak_gpu_bytes against waits.need), and every such job then
# failed for memory and reran with the whole GPU to itself while the other jobs waited
CHUNK = 1 << 24


def _slices(*tensors: torch.Tensor):
    """Matching flat slices of same-shaped tensors, CHUNK elements at a time."""
    flat = [t.reshape(-1) for t in tensors]
    for start in range(0, flat[0].numel(), CHUNK):
        yield tuple(f[start:start + CHUNK] for f in flat)


def _close(a: list, b: list, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and _close_one(x, y, rtol, atol) for x, y in zip(a, b))


def _close_one(x: torch.Tensor, y: torch.Tensor, rtol: float, atol: float) -> bool:
    return all(torch.allclose(u.double(), v.double(), rtol=rtol, atol=atol, equal_nan=True) for u, v in _slices(x, y))


def _equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and all(torch.equal(u, v) for u, v in _slices(x, y))
        for x, y in zip(a, b))


def _stage(stage: str, fn, *args):
    """fn(*args); any exception it raises is this stage's rejection."""
    try:
        return fn(*args)
    except Rejected:
        raise
    except Exception as err:  # noqa: BLE001  (task code may raise anything)
        raise Rejected(stage, f"{type(err).__name__}: {err}".strip()[:400]) from None


def check_finite(outputs: list) -> None:
    for i, out in enumerate(outputs):
        if out.is_floating_point() and not all(bool(torch.isfinite(u).all()) for (u,) in _slices(out)):
            raise Rejected("finite", f"output {i} has NaN or Inf values")


def check_deterministic(task, base: list, device: str) -> str:
    again = _run(task, device, forward_seed=12)
    if _equal(base, again):
        return "bitwise"
    if _close(base, again):
        return "within 1e-5"  # atomics: the order of a float reduction may vary
    raise Rejected("deterministic", "outputs differ between two runs on the same inputs and weights")


def check_nontrivial(outputs: list) -> None:
    for i, out in enumerate(o for o in outputs if o.is_floating_point()):
        peak = max((float(u.abs().max()) for (u,) in _slices(out)), default=0.0)
        if peak < NEAR_ZERO:
            raise Rejected("trivial", f"output {i} is near zero everywhere (max |x| < {NEAR_ZERO:g})")
        if out.numel() > 1 and _std(out) < NEAR_ZERO * max(1.0, _mean_abs(out)):
            raise Rejected("trivial", f"output {i} is constant")


def _mean_abs(out: torch.Tensor) -> float:
    return sum(float(u.double().abs().sum()) for (u,) in _slices(out)) / out.numel()


def _std(out: torch.Tensor) -> float:
    """The sample standard deviation in float64, two passes over slices (as torch.std of a float64 copy)."""
    mean = sum(float(u.double().sum()) for (u,) in _slices(out)) / out.numel()
    squares = sum(float((u.double() - mean).square().sum()) for (u,) in _slices(out))
    return (squares / (out.numel() - 1)) ** 0.5


def check_dependence(task, base: list, device: str) -> dict:
    """Each input alone replaced by a fresh draw, then the weights: the output must change."""
    inputs = loading.seeded_inputs(task, INPUTS, device, "fp32")
    others = loading.seeded_inputs(task, OTHER_INPUTS, device, "fp32")
    for i, other in enumerate(others):
        if not isinstance(other, torch.Tensor):
            continue
        changed = inputs[:i] + [other] + inputs[i + 1:]
        if _close(base, _run(task, device, inputs=changed)):
            raise Rejected("dependence", f"output does not change when input {i} changes (ignores input {i})")
    params = sum(p.numel() for p in loading.seeded_reference(task, WEIGHTS, device, "fp32").parameters())
    if params and _close(base, _run(task, device, weights=OTHER_WEIGHTS)):
        raise Rejected("dependence", "output does not change when the weights change (ignores its weights)")
    return {"inputs": len(others), "params": params}


def median_ms(fn, inputs: list, device: str, budget_s: float = 0.3, max_runs: int = 50) -> float:
    """Median wall time of fn(*inputs) after two warm-up calls, synchronised on CUDA."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.no_grad():
        for _ in range(2):
            fn(*inputs)
        sync()
        samples, start = [], time.perf_counter()
        while len(samples) < 3 or (len(samples) < max_runs and time.perf_counter() - start < budget_s):
            t0 = time.perf_counter()
            fn(*inputs)
            sync()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def check_window(eager_ms: float, window: list[float]) -> None:
    low, high = window
    if eager_ms < low:
        raise Rejected("timing", f"eager {eager_ms:.4g} ms is below the window's {low:g} ms (too small a workload)")
    if eager_ms > high:
        raise Rejected("timing", f"eager {eager_ms:.4g} ms is above the window's {high:g} ms (too large a workload)")


def compiled_checked(task, base: list, device: str, inputs: list, unheld: bool = False):
    """(compile seconds, the compiled model) of torch.compile(fullgraph=True), which must agree with eager.
    `unheld`: the job holds no GPU lock while the code is generated (gpu_phase.unheld_while_compiling)."""
    compiled = torch.compile(loading.seeded_reference(task, WEIGHTS, device, "fp32"), fullgraph=True)
    start = time.perf_counter()
    torch.manual_seed(11)
    with gpu_phase.unheld_while_compiling() if unheld else contextlib.nullcontext():
        got = _outputs(compiled, inputs)
    seconds = time.perf_counter() - start
    if not _close(base, got, rtol=1e-3, atol=1e-3):
        raise Rejected("compile", "torch.compile's output differs from eager's beyond 1e-3")
    return seconds, compiled


def eager_run(task, device: str):
    return loading.seeded_reference(task, WEIGHTS, device, "fp32"), loading.seeded_inputs(task, INPUTS, device, "fp32")


def check_not_below(eager_ms: float, window: list[float]) -> None:
    """Eager timed beside other jobs on a shared GPU, which only slows it: below the window's floor even so,
    it is below it alone (70 of an H100 run's 72 timing rejections), and the job need not wait for the GPU
    alone nor compile. Above the floor it says nothing: the exact check comes with the GPU alone."""
    if eager_ms < window[0]:
        raise Rejected("timing", f"eager at most {eager_ms:.4g} ms (timed beside other jobs) is below the window's "
                                 f"{window[0]:g} ms (too small a workload)")


def timed_alone(report: dict, eager, compiled, inputs: list, device: str, window: list[float]) -> None:
    """Eager and the compiled model timed in one hold of the GPU alone; eager checked against the window."""
    with _alone(device):
        report["eager_ms"] = round(median_ms(eager, inputs, device), 5)
        check_window(report["eager_ms"], window)
        report["compile_ms"] = round(median_ms(compiled, inputs, device), 5)


@contextlib.contextmanager
def _alone(device: str):
    """The GPU alone for the block. Synchronised first: between letting its shared hold go and getting the
    GPU alone the job holds nothing, and none of its kernels may still run then, beside another's timing."""
    if device == "cuda":
        torch.cuda.synchronize()
    with gpu_phase.alone():
        yield


def run_rubric(job: dict) -> dict:
    """The job's answer: accepted, or the stage and reason of the rejection; checks and times so far."""
    import os

    # inductor's pool of compile processes costs seconds to start and buys nothing for one small graph
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    if job.get("inductor_cache"):  # shared by the tasks of one run that kernelsmith itself wrote
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = job["inductor_cache"]
    # (Triton's own cache: TRITON_HOME, set where the worker is started, runner._worker_env)
    report = {"accepted": False, "stage": None, "reason": None, "checks": {}, "eager_ms": None,
              "compile_ms": None, "stage_s": {}}
    try:
        _stages(job, report)
        report["accepted"] = True
    except Rejected as rejected:
        report["stage"], report["reason"] = rejected.stage, rejected.reason
    if job["device"] == "cuda" and torch.cuda.is_initialized():  # against the parent's plan (rubric.memory_need)
        report["peak_gpu_bytes"] = torch.cuda.max_memory_reserved()
    return report


def _timed(report: dict, stage: str, fn, *args):
    start = time.perf_counter()
    try:
        return _stage(stage, fn, *args)
    finally:
        report["stage_s"][stage] = round(report["stage_s"].get(stage, 0.0) + time.perf_counter() - start, 4)


def _stages(job: dict, report: dict) -> None:
    device, checks = job["device"], report["checks"]
    task = _timed(report, "load", _load, job["reference"])
    base = _timed(report, "eager", _run, task, device)
    _timed(report, "finite", check_finite, base)
    checks["deterministic"] = _timed(report, "deterministic", check_deterministic, task, base, device)
    _timed(report, "trivial", check_nontrivial, base)
    checks["dependence"] = _timed(report, "dependence", check_dependence, task, base, device)
    _times(job, report, task, base)


def _times(job: dict, report: dict, task, base: list) -> None:
    """Eager within the window, then torch.compile's model. Sharing a GPU (phased), a first timing beside
    the others can only reject as too small; compiled, the job then times both with the GPU alone, once."""
    device, window, phased = job["device"], job["window_ms"], gpu_phase.phased()
    eager, inputs = _timed(report, "timing", eager_run, task, device)
    report["eager_ms"] = round(_timed(report, "timing", median_ms, eager, inputs, device), 5)
    _timed(report, "timing", check_not_below if phased else check_window, report["eager_ms"], window)
    compile_s, compiled = _timed(report, "compile", compiled_checked, task, base, device, inputs,
                                 bool(job.get("compile_unheld")))
    report["checks"]["compile_s"] = round(compile_s, 3)
    if phased:
        _timed(report, "timing", timed_alone, report, eager, compiled, inputs, device, window)
    else:
        report["compile_ms"] = round(_timed(report, "compile", median_ms, compiled, inputs, device), 5)


def _load(path: str):
    task = loading.load_module(path, "ks_synth_task")
    loading.require(task, "Model", "get_inputs", "get_init_inputs")
    return task


def capture_graph(job: dict) -> dict:
    """The "opgraph" job: the operator graph of one task file, or of every task under a folder."""
    from kernelsmith.synth import decontaminate

    if job.get("folder"):
        return decontaminate.capture_folder(job["folder"])
    with open(job["reference"]) as f:
        return decontaminate.capture_source(f.read()).to_dict()
