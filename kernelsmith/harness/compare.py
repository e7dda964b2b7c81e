"""Output comparison with per-precision tolerances (the numbers and how they were derived:
docs/tolerances.md; the measurements behind them: bench/honest_errors.py).

Two checks, both must pass:

- per element: |c - r| <= atol * rms(r) + rtol * |r|. The absolute part is relative to the
  size of the output (its RMS over the finite elements), so a tensor of small values (softmax
  probabilities, a GEMM of small operands) is not judged against an absolute 1e-4 that any of
  its elements fits under.
- aggregate: ||c - r||_2 / ||r||_2 <= rel_l2. A systematic error that stays under the
  per-element bound on every element (TF32 or bf16 rounding, int8 quantisation, dropped
  small terms) shows up here.

fp32 is tight, so TF32, bf16 or fp16 arithmetic inside an fp32 task fails; honest fp32
reorderings (other summation orders and blockings, FMA or not, fused or not, GEMMs with K up
to 8192, scans and sums of millions of terms, the exact answer itself on every dev task) pass.
A looser precision is an explicit mode; its baselines run at that precision too. In the bf16
and fp16 modes the candidate is judged against the reference computed in fp32 (from the same
cast weights and inputs), with room for eager's own distance from it (EAGER_*).

Stressed trials (inputs scaled and shifted far from get_inputs()'s distribution,
evaluation/seeds.py) are judged with STRESSED, looser bounds, widened further by the
reference's own sensitivity there: the judge also runs the reference on the stressed inputs
jittered by SENSITIVITY_JITTER, and a candidate may differ from the reference by
SENSITIVITY_FACTOR times as much as that jitter moved it. Stressed trials are there to catch
overflow and range bugs; on inputs where the problem itself is ill-conditioned (a GRU driven
into saturation, a batch norm of shifted GEMM outputs) honest rounding differences grow with
the conditioning, and the jitter measures by how much.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import torch

from kernelsmith.evaluation.result import PRECISIONS


@dataclass(frozen=True)
class Tolerance:
    rtol: float  # per element, times |reference element|
    atol: float  # per element, times the reference's RMS (not an absolute number)
    rel_l2: float  # aggregate: ||candidate - reference|| / ||reference||


TOLERANCES = {
    "fp32": Tolerance(rtol=1e-4, atol=5e-4, rel_l2=5e-5),
    "tf32": Tolerance(rtol=1e-2, atol=1e-2, rel_l2=5e-3),
    "bf16": Tolerance(rtol=2e-2, atol=2e-2, rel_l2=1e-2),
    "fp16": Tolerance(rtol=1e-2, atol=1e-2, rel_l2=5e-3),
}
# Stressed trials: the floor of what is allowed (the reference's measured sensitivity can only
# widen it). In the half-precision modes the reference has no correct digit left on shifted
# inputs (bf16 resolves 128 + x in steps of 1), so only the pattern of Inf and NaN is checked.
_ANY = math.inf
STRESSED = {
    "fp32": Tolerance(rtol=5e-2, atol=5e-2, rel_l2=1e-2),
    "tf32": Tolerance(rtol=1.0, atol=1.0, rel_l2=0.25),
    "bf16": Tolerance(rtol=_ANY, atol=_ANY, rel_l2=_ANY),
    "fp16": Tolerance(rtol=_ANY, atol=_ANY, rel_l2=_ANY),
}
# bf16 and fp16 modes: eager at that precision rounds after every op, and after a normalisation
# or a long scan it is itself far from the answer (a bf16 cumsum of 32768 terms stagnates: 1.7
# relative L2 on the dev task). The judge compares with the same function computed in fp32 from
# the same cast weights and inputs, and a candidate may be EAGER_FACTOR times as far from it as
# eager is, per element, and in aggregate up to a relative L2 of EAGER_CAP: where eager itself is
# garbage (that cumsum), an accurate kernel passes and one that stagnates like eager does not.
EAGER_FACTOR = 2.0
EAGER_CAP = 0.1
SENSITIVITY_JITTER = 2.0 ** -20  # relative, random sign per element: 8 fp32 ulps
SENSITIVITY_FACTOR = 64.0  # an honest kernel's rounding reaches ~u * sqrt(K): 64 x 8 ulps covers K = 65536
assert tuple(TOLERANCES) == PRECISIONS == tuple(STRESSED)
_DTYPE_PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def tolerance_for(dtype: torch.dtype, precision: str, stressed: bool = False) -> Tolerance:
    """Per dtype: a half-precision output can never be held to the fp32 tolerance; an fp32 or
    fp64 output gets the tolerance of the precision mode."""
    table = STRESSED if stressed else TOLERANCES
    return table[_DTYPE_PRECISION.get(dtype, precision)]


def compare(candidate: torch.Tensor, reference: torch.Tensor, precision: str, stressed: bool = False,
            jittered: torch.Tensor | None = None, accurate: torch.Tensor | None = None) -> dict:
    """Verdict for one output: ok, a reason when not, and error statistics. `jittered` (stressed
    trials) is the reference's output on slightly jittered inputs: how far it moved widens the
    bounds. `accurate` (bf16 and fp16 modes) is the reference computed in fp32: the candidate
    is judged against it, with room for as far as `reference` (eager) is from it."""
    if candidate.shape != reference.shape:
        return {"ok": False, "reason": f"shape {tuple(candidate.shape)} != reference {tuple(reference.shape)}"}
    if candidate.dtype != reference.dtype:
        return {"ok": False, "reason": f"dtype {candidate.dtype} != reference {reference.dtype}"}
    if candidate.device != reference.device:
        candidate = candidate.to(reference.device)
    if not reference.is_floating_point() and not reference.is_complex():
        wrong = int((candidate != reference).sum())
        return {"ok": wrong == 0, "reason": f"{wrong} elements differ" if wrong else "", "mismatched": wrong}
    tol = tolerance_for(reference.dtype, precision, stressed)
    if accurate is not None and reference.dtype in _DTYPE_PRECISION:
        return _compare_floating(candidate, accurate.to(reference.device, reference.dtype), tol, jittered, reference)
    return _compare_floating(candidate, reference, tol, jittered)


CHUNK = 1 << 26  # elements per comparison chunk: bounds the float64 temporaries to ~0.5 GB each
# On the CPU every fresh temporary of a large chunk is page-faulted in (glibc maps big blocks anew each
# time): chunks that stay in the heap and the cache compare a 32 MB output 8x faster.
CPU_CHUNK = 1 << 18


def chunk_for(x: torch.Tensor) -> int:
    """Elements per float64 chunk on x's device."""
    return CPU_CHUNK if x.device.type == "cpu" else CHUNK


def reference_scale(ref: torch.Tensor) -> tuple[float, float]:
    """(RMS, max |r|) over the finite elements of the reference, in float64, chunked."""
    flat, chunk = ref.reshape(-1), chunk_for(ref)
    sq, top, count = 0.0, 0.0, 0
    for lo in range(0, flat.numel(), chunk):
        r = flat[lo:lo + chunk].double()
        finite = torch.isfinite(r)
        a = torch.where(finite, r.abs(), torch.zeros((), dtype=torch.float64, device=r.device))
        sq += float((a * a).sum())
        top = max(top, float(a.max())) if a.numel() else top
        count += int(finite.sum())
    return (sq / count) ** 0.5 if count else 0.0, top


def sensitivity(jittered: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """How far the reference moved under the input jitter: (relative L2, max abs), over the
    reference's finite elements; infinite when the jittered output lost finiteness there."""
    j_flat, r_flat = jittered.reshape(-1).to(ref.device), ref.reshape(-1)
    sq_d, sq_r, top, chunk = 0.0, 0.0, 0.0, chunk_for(ref)
    for lo in range(0, r_flat.numel(), chunk):
        j, r = j_flat[lo:lo + chunk].double(), r_flat[lo:lo + chunk].double()
        finite = torch.isfinite(r)
        if bool((finite & ~torch.isfinite(j)).any()):
            return math.inf, math.inf
        d = torch.where(finite, (j - r).abs(), torch.zeros((), dtype=torch.float64, device=r.device))
        a = torch.where(finite, r.abs(), torch.zeros((), dtype=torch.float64, device=r.device))
        sq_d, sq_r = sq_d + float((d * d).sum()), sq_r + float((a * a).sum())
        top = max(top, float(d.max())) if d.numel() else top
    return (sq_d ** 0.5 / sq_r ** 0.5 if sq_r else (0.0 if sq_d == 0 else math.inf)), top


def _compare_floating(cand: torch.Tensor, ref: torch.Tensor, tol: Tolerance, jittered, eager=None) -> dict:
    rms, top = reference_scale(ref)
    # the absolute part scales with the output; the floor (the dtype's smallest normal number)
    # only matters for an all-zero reference, where the candidate must be zero too
    atol = (tol.atol * rms if rms > 0 else 0.0) + float(torch.finfo(ref.dtype).tiny)
    moved = None
    if jittered is not None:
        moved = sensitivity(jittered, ref)
        atol += SENSITIVITY_FACTOR * moved[1]
        tol = replace(tol, rel_l2=max(tol.rel_l2, SENSITIVITY_FACTOR * moved[0]))
    eager_gap = None
    if eager is not None:  # room for eager's own distance from the accurate answer
        eager_gap = sensitivity(eager, ref)[0]
        tol = replace(tol, rel_l2=max(tol.rel_l2, min(EAGER_FACTOR * eager_gap, EAGER_CAP)))
    c_flat, r_flat = cand.reshape(-1), ref.reshape(-1)
    e_flat = eager.reshape(-1) if eager is not None else None
    totals = {"extra_nan": 0, "bad_inf": 0, "mismatched": 0, "max_abs_err": 0.0, "max_rel_err": 0.0,
              "max_tol_ratio": 0.0, "sq_err": 0.0, "sq_ref": 0.0, "first": None}
    chunk = chunk_for(ref)
    for lo in range(0, c_flat.numel(), chunk):
        room = None
        if e_flat is not None:
            gap = (e_flat[lo:lo + chunk].double() - r_flat[lo:lo + chunk].double()).abs()
            room = torch.nan_to_num(gap, nan=0.0, posinf=0.0).mul_(EAGER_FACTOR)
        _compare_chunk(c_flat[lo:lo + chunk].double(), r_flat[lo:lo + chunk].double(), atol, tol.rtol, lo, totals,
                       room)
    verdict = _verdict(totals, ref, tol, atol, rms, top)
    if eager_gap is not None and "rel_l2_err" in verdict:
        verdict["eager_rel_l2"] = _json_number(eager_gap)
    if moved is not None and "rel_l2_err" in verdict:
        verdict["sensitivity_l2"], verdict["sensitivity_max"] = _json_number(moved[0]), _json_number(moved[1])
    return verdict


def _compare_chunk(c: torch.Tensor, r: torch.Tensor, atol: float, rtol: float, offset: int, totals: dict,
                   room: torch.Tensor | None = None) -> None:
    c_nan, r_nan = torch.isnan(c), torch.isnan(r)
    totals["extra_nan"] += int((c_nan & ~r_nan).sum())
    c_inf, r_inf = torch.isinf(c), torch.isinf(r)
    totals["bad_inf"] += int((c_inf != r_inf).sum() + (c_inf & r_inf & (c != r)).sum())
    finite = ~(r_nan | r_inf)
    zero = torch.zeros((), dtype=c.dtype, device=c.device)
    diff = torch.where(finite & ~c_nan, (c - r).abs(), zero)
    r_abs = torch.where(finite, r.abs(), zero)
    if math.isfinite(atol) and math.isfinite(rtol):
        allowed = atol + rtol * r_abs if room is None else atol + rtol * r_abs + room
    else:  # unbounded (stressed half-precision trials, an unstable reference): only Inf/NaN count
        allowed = torch.full_like(diff, math.inf)
    bad = diff > allowed
    count = int(bad.sum())
    if count and totals["first"] is None:
        i = int(bad.nonzero()[0, 0])
        totals["first"] = (offset + i, float(c[i]), float(r[i]))
    totals["mismatched"] += count
    if diff.numel():
        totals["max_abs_err"] = max(totals["max_abs_err"], float(diff.max()))
        totals["max_rel_err"] = max(totals["max_rel_err"], float((diff / r_abs.clamp_min(1e-12)).max()))
        totals["max_tol_ratio"] = max(totals["max_tol_ratio"], float((diff / allowed).max()))
        totals["sq_err"] += float((diff * diff).sum())
        totals["sq_ref"] += float((r_abs * r_abs).sum())


def _verdict(totals: dict, ref: torch.Tensor, tol: Tolerance, atol: float, rms: float, top: float) -> dict:
    if totals["extra_nan"]:
        return {"ok": False, "mismatched": totals["extra_nan"],
                "reason": f"{totals['extra_nan']} NaN values where the reference has none (unwritten output or bad math)"}
    if totals["bad_inf"]:
        return {"ok": False, "mismatched": totals["bad_inf"],
                "reason": f"{totals['bad_inf']} Inf values differ from the reference"}
    rel_l2 = 0.0 if totals["sq_err"] == 0.0 else (totals["sq_err"] ** 0.5) / max(totals["sq_ref"] ** 0.5, 1e-300)
    stats = {"max_abs_err": totals["max_abs_err"], "max_rel_err": totals["max_rel_err"], "rel_l2_err": rel_l2,
             "ref_rms": rms, "ref_max_abs": top, "max_tol_ratio": totals["max_tol_ratio"],
             "rel_l2_ratio": rel_l2 / tol.rel_l2, "atol": _json_number(atol), "rtol": _json_number(tol.rtol),
             "tolerance": {k: _json_number(v) for k, v in asdict(tol).items()},
             "mismatched": totals["mismatched"], "ok": True, "reason": ""}
    if totals["mismatched"]:
        flat, got, want = totals["first"]
        index = [int(i) for i in torch.unravel_index(torch.tensor(flat), ref.shape)] if ref.dim() else []
        stats["ok"] = False
        stats["reason"] = (f"{totals['mismatched']} of {ref.numel()} elements outside atol={tol.atol:g} "
                           f"(x reference rms {rms:.3g}: {atol:.3g}) rtol={tol.rtol:g} "
                           f"(max abs err {stats['max_abs_err']:.3g}; first at {index}: "
                           f"got {got:.6g}, expected {want:.6g})")
    elif rel_l2 > tol.rel_l2:
        stats["ok"] = False
        stats["reason"] = (f"relative L2 error {rel_l2:.3g} exceeds {tol.rel_l2:.3g}: every element is within "
                           f"its bound but the error is systematic (lowered precision, quantisation or "
                           f"dropped terms; max abs err {stats['max_abs_err']:.3g}, reference rms {rms:.3g})")
    return stats


def _json_number(value: float) -> float | None:
    """Results are JSON: an unbounded tolerance is null, not Infinity."""
    return value if math.isfinite(value) else None


MERGED_MAX = ("max_abs_err", "max_rel_err", "rel_l2_err", "max_tol_ratio", "rel_l2_ratio")


def compare_all(candidates: list, references: list, precision: str, stressed: bool = False,
                jittered: list | None = None, accurate: list | None = None) -> dict:
    """Compare lists of outputs; the first failure decides. The statistics are the worst over
    the outputs; with several outputs, each one's are kept under "outputs"."""
    if len(candidates) != len(references):
        return {"ok": False, "reason": f"{len(candidates)} outputs, reference has {len(references)}"}
    merged: dict = {"ok": True, "reason": ""}
    per_output = []
    for i, (c, r) in enumerate(zip(candidates, references)):
        verdict = compare(c, r, precision, stressed, jittered[i] if jittered is not None else None,
                          accurate[i] if accurate is not None else None)
        per_output.append({k: verdict[k] for k in (*MERGED_MAX, "ref_rms", "sensitivity_l2", "eager_rel_l2")
                           if k in verdict})
        for key in MERGED_MAX:
            if key in verdict:
                merged[key] = max(merged.get(key, 0.0), verdict[key])
        for key in ("ref_rms", "tolerance"):
            if key in verdict and key not in merged:
                merged[key] = verdict[key]
        if not verdict["ok"]:
            if len(references) > 1:
                merged["outputs"] = per_output
            prefix = f"output {i}: " if len(references) > 1 else ""
            return {**merged, **verdict, "ok": False, "reason": prefix + verdict["reason"]}
    if len(references) > 1:
        merged["outputs"] = per_output
    return merged
