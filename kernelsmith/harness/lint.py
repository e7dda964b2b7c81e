"""Checks of a task's reference, run in a worker: it runs, it is deterministic,
and its outputs depend on its inputs and weights. Degenerate tasks are flagged
(warnings), because a zero, constant or identity kernel would "pass" them.
"""

from __future__ import annotations

import time

import torch

from kernelsmith.harness import compare as cmp
from kernelsmith.harness import guards, loading

NEAR_ZERO = 1e-6
EAGER_RANGE_MS = (0.001, 10_000.0)


# Outputs stay where they were computed and are compared a chunk at a time: a multi-GB output
# (level1/21_Sigmoid: 6.4 GB) copied to the host in float64 twice per comparison took tens of GB
# of host memory per lint, and four lints side by side were killed by the out-of-memory killer.
CHUNK = 1 << 24  # elements


def _run(task, weights_seed: int, inputs_seed: int, device: str, precision: str, forward_seed: int = 11) -> list:
    model = loading.seeded_reference(task, weights_seed, device, precision)
    inputs = loading.seeded_inputs(task, inputs_seed, device, precision)
    torch.manual_seed(forward_seed)  # randomness inside forward (dropout) must show up as non-determinism
    with torch.no_grad():
        return [o.detach() for o in guards.flatten_outputs(model(*inputs))]


def _chunks(x: torch.Tensor):
    flat, chunk = x.reshape(-1), (cmp.CPU_CHUNK if x.device.type == "cpu" else CHUNK)
    for start in range(0, flat.numel(), chunk):
        yield flat[start:start + chunk]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def _close(a: list, b: list) -> bool:
    return all(x.shape == y.shape and all(torch.allclose(p.double(), q.double(), atol=1e-6, rtol=1e-5)
                                          for p, q in zip(_chunks(x), _chunks(y)))
               for x, y in zip(a, b))


def _finite_stats(out: torch.Tensor) -> tuple[int, float, float, float]:
    """(count, max |x|, mean |x|, std) of the finite values, in float64, a chunk at a time (two passes)."""
    count, peak, total, total_abs = 0, 0.0, 0.0, 0.0
    for chunk in _chunks(out):
        values = chunk.double()[torch.isfinite(chunk)]
        if values.numel():
            count, total = count + values.numel(), total + float(values.sum())
            total_abs, peak = total_abs + float(values.abs().sum()), max(peak, float(values.abs().max()))
    if count == 0:
        return 0, 0.0, 0.0, 0.0
    mean = total / count
    squares = sum(float(((c.double()[torch.isfinite(c)] - mean) ** 2).sum()) for c in _chunks(out))
    return count, peak, total_abs / count, (squares / max(count - 1, 1)) ** 0.5


def lint_task(job: dict) -> dict:
    device, precision = job["device"], job.get("precision", "fp32")
    guards.set_precision_flags(precision)
    task = loading.load_module(job["reference"], "ks_reference")
    loading.require(task, "Model", "get_inputs", "get_init_inputs")
    start = time.perf_counter()
    base = _run(task, 1, 2, device, precision)
    first_s = time.perf_counter() - start
    report = {"outputs": [{"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")} for o in base],
              "inputs": _describe(loading.seeded_inputs(task, 2, device, precision)),
              "params": sum(p.numel() for p in loading.seeded_reference(task, 1, device, precision).parameters()),
              "warnings": [], "flags": [], "first_run_s": round(first_s, 3)}
    _check_determinism(task, base, device, precision, report)
    _check_dependence(task, base, device, precision, report)
    _check_magnitude(base, report)
    return report


def _describe(inputs: list) -> list[dict]:
    return [{"shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", "")} if isinstance(x, torch.Tensor)
            else {"value": repr(x)} for x in inputs]


def _flag(report: dict, flag: str, message: str) -> None:
    report["flags"].append(flag)
    report["warnings"].append(message)


def _check_determinism(task, base, device, precision, report) -> None:
    again = _run(task, 1, 2, device, precision, forward_seed=12)
    if not _same(base, again) and not _close(base, again):
        _flag(report, "non_deterministic", "outputs differ between two runs on the same inputs and weights")


def _check_dependence(task, base, device, precision, report) -> None:
    if _close(base, _run(task, 1, 3, device, precision)):
        _flag(report, "ignores_inputs", "outputs do not change when the inputs change")
    if report["params"] and _close(base, _run(task, 4, 2, device, precision)):
        _flag(report, "ignores_weights", "outputs do not change when the weights change")


def _check_magnitude(base, report) -> None:
    for i, out in enumerate(base):
        if not out.is_floating_point() or out.numel() == 0:
            continue
        count, peak, mean_abs, std = _finite_stats(out)
        if count == 0:
            _flag(report, "non_finite", f"output {i} has no finite values")
        elif peak < NEAR_ZERO:
            _flag(report, "near_zero", f"output {i} is near zero everywhere (max |x| < {NEAR_ZERO:g})")
        elif count > 1 and std < NEAR_ZERO * max(1.0, mean_abs):
            _flag(report, "near_constant", f"output {i} is nearly constant")
