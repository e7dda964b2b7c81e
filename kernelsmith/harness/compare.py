"""Output comparison with per-precision tolerances.

fp32 is tight (1e-4, as KernelBench's current default), so TF32, bf16 or fp16
arithmetic inside an fp32 task fails. A looser precision is an explicit mode;
its baselines run at that precision too.
"""

from __future__ import annotations

import torch

TOLERANCES = {  # (atol, rtol)
    "fp32": (1e-4, 1e-4),
    "tf32": (1e-2, 1e-2),
    "bf16": (2e-2, 2e-2),
    "fp16": (1e-2, 1e-2),
}
PRECISIONS = tuple(TOLERANCES)


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


def _compare_floating(cand: torch.Tensor, ref: torch.Tensor, precision: str) -> dict:
    atol, rtol = TOLERANCES[precision]
    c, r = cand.double(), ref.double()
    c_nan, r_nan = torch.isnan(c), torch.isnan(r)
    extra_nan = int((c_nan & ~r_nan).sum())
    if extra_nan:
        return {"ok": False, "mismatched": extra_nan,
                "reason": f"{extra_nan} NaN values where the reference has none (unwritten output or bad math)"}
    c_inf, r_inf = torch.isinf(c), torch.isinf(r)
    bad_inf = int((c_inf != r_inf).sum() + (c_inf & r_inf & (c != r)).sum())
    if bad_inf:
        return {"ok": False, "mismatched": bad_inf, "reason": f"{bad_inf} Inf values differ from the reference"}
    finite = ~(r_nan | r_inf)
    diff = (c - r).abs().where(finite, torch.zeros_like(c))
    allowed = atol + rtol * r.abs().where(finite, torch.zeros_like(r))
    bad = diff > allowed
    mismatched = int(bad.sum())
    stats = {
        "max_abs_err": float(diff.max()) if diff.numel() else 0.0,
        "max_rel_err": float((diff / r.abs().clamp_min(1e-12)).where(finite, torch.zeros_like(c)).max())
        if diff.numel() else 0.0,
        "rel_l2_err": float(diff.norm() / r.where(finite, torch.zeros_like(r)).norm().clamp_min(1e-30))
        if diff.numel() else 0.0,
        "atol": atol, "rtol": rtol, "mismatched": mismatched,
    }
    if mismatched:
        idx = tuple(int(i) for i in bad.nonzero()[0])
        stats["reason"] = (f"{mismatched} of {ref.numel()} elements outside atol={atol:g} rtol={rtol:g} "
                           f"(max abs err {stats['max_abs_err']:.3g}; first at {list(idx)}: "
                           f"got {float(c[idx]):.6g}, expected {float(r[idx]):.6g})")
    stats["ok"] = mismatched == 0
    stats.setdefault("reason", "")
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
