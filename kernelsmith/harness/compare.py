"""Output comparison with per-precision tolerances.

fp32 is tight (1e-4, as KernelBench's current default), so TF32, bf16 or fp16
arithmetic inside an fp32 task fails. A looser precision is an explicit mode;
its baselines run at that precision too.
"""

from __future__ import annotations

import torch

from kernelsmith.evaluation.result import PRECISIONS

TOLERANCES = {  # (atol, rtol)
    "fp32": (1e-4, 1e-4),
    "tf32": (1e-2, 1e-2),
    "bf16": (2e-2, 2e-2),
    "fp16": (1e-2, 1e-2),
}
assert tuple(TOLERANCES) == PRECISIONS
_DTYPE_PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def tolerance_for(dtype: torch.dtype, precision: str) -> tuple[float, float]:
    """Per dtype: a half-precision output can never be held to the fp32 tolerance; an fp32 or
    fp64 output gets the tolerance of the precision mode."""
    return TOLERANCES[_DTYPE_PRECISION.get(dtype, precision)]


def compare(candidate: torch.Tensor, reference: torch.Tensor, precision: str) -> dict:
    """Verdict for one output: ok, a reason when not, and error statistics."""
    if candidate.shape != reference.shape:
        return {"ok": False, "reason": f"shape {tuple(candidate.shape)} != reference {tuple(reference.shape)}"}
    if candidate.dtype != reference.dtype:
        return {"ok": False, "reason": f"dtype {candidate.dtype} != reference {reference.dtype}"}
    if candidate.device != reference.device:
        candidate = candidate.to(reference.device)
    if not reference.is_floating_point() and not reference.is_complex():
        wrong = int((candidate != reference).sum())
        return {"ok": wrong == 0, "reason": f"{wrong} elements differ" if wrong else "", "mismatched": wrong}
    return _compare_floating(candidate, reference, precision)


CHUNK = 1 << 26  # elements per comparison chunk: bounds the float64 temporaries to ~0.5 GB each


def _compare_floating(cand: torch.Tensor, ref: torch.Tensor, precision: str) -> dict:
    atol, rtol = tolerance_for(ref.dtype, precision)
    c_flat, r_flat = cand.reshape(-1), ref.reshape(-1)
    totals = {"extra_nan": 0, "bad_inf": 0, "mismatched": 0, "max_abs_err": 0.0, "max_rel_err": 0.0,
              "sq_err": 0.0, "sq_ref": 0.0, "first": None}
    for lo in range(0, c_flat.numel(), CHUNK):
        _compare_chunk(c_flat[lo:lo + CHUNK].double(), r_flat[lo:lo + CHUNK].double(), atol, rtol, lo, totals)
    return _verdict(totals, ref, atol, rtol)


def _compare_chunk(c: torch.Tensor, r: torch.Tensor, atol: float, rtol: float, offset: int, totals: dict) -> None:
    c_nan, r_nan = torch.isnan(c), torch.isnan(r)
    totals["extra_nan"] += int((c_nan & ~r_nan).sum())
    c_inf, r_inf = torch.isinf(c), torch.isinf(r)
    totals["bad_inf"] += int((c_inf != r_inf).sum() + (c_inf & r_inf & (c != r)).sum())
    finite = ~(r_nan | r_inf)
    zero = torch.zeros((), dtype=c.dtype, device=c.device)
    diff = torch.where(finite & ~c_nan, (c - r).abs(), zero)
    r_abs = torch.where(finite, r.abs(), zero)
    bad = diff > atol + rtol * r_abs
    count = int(bad.sum())
    if count and totals["first"] is None:
        i = int(bad.nonzero()[0, 0])
        totals["first"] = (offset + i, float(c[i]), float(r[i]))
    totals["mismatched"] += count
    if diff.numel():
        totals["max_abs_err"] = max(totals["max_abs_err"], float(diff.max()))
        totals["max_rel_err"] = max(totals["max_rel_err"], float((diff / r_abs.clamp_min(1e-12)).max()))
        totals["sq_err"] += float((diff * diff).sum())
        totals["sq_ref"] += float((r_abs * r_abs).sum())


def _verdict(totals: dict, ref: torch.Tensor, atol: float, rtol: float) -> dict:
    if totals["extra_nan"]:
        return {"ok": False, "mismatched": totals["extra_nan"],
                "reason": f"{totals['extra_nan']} NaN values where the reference has none (unwritten output or bad math)"}
    if totals["bad_inf"]:
        return {"ok": False, "mismatched": totals["bad_inf"],
                "reason": f"{totals['bad_inf']} Inf values differ from the reference"}
    stats = {"max_abs_err": totals["max_abs_err"], "max_rel_err": totals["max_rel_err"],
             "rel_l2_err": (totals["sq_err"] ** 0.5) / max(totals["sq_ref"] ** 0.5, 1e-30),
             "atol": atol, "rtol": rtol, "mismatched": totals["mismatched"], "ok": totals["mismatched"] == 0,
             "reason": ""}
    if totals["mismatched"]:
        flat, got, want = totals["first"]
        index = [int(i) for i in torch.unravel_index(torch.tensor(flat), ref.shape)] if ref.dim() else []
        stats["reason"] = (f"{totals['mismatched']} of {ref.numel()} elements outside atol={atol:g} rtol={rtol:g} "
                           f"(max abs err {stats['max_abs_err']:.3g}; first at {index}: "
                           f"got {got:.6g}, expected {want:.6g})")
    return stats


def compare_all(candidates: list, references: list, precision: str) -> dict:
    """Compare lists of outputs; the first failure decides."""
    if len(candidates) != len(references):
        return {"ok": False, "reason": f"{len(candidates)} outputs, reference has {len(references)}"}
    merged: dict = {"ok": True, "reason": ""}
    for i, (c, r) in enumerate(zip(candidates, references)):
        verdict = compare(c, r, precision)
        for key in ("max_abs_err", "max_rel_err", "rel_l2_err"):
            if key in verdict:
                merged[key] = max(merged.get(key, 0.0), verdict[key])
        if not verdict["ok"]:
            prefix = f"output {i}: " if len(references) > 1 else ""
            return {**merged, **verdict, "ok": False, "reason": prefix + verdict["reason"]}
    return merged
