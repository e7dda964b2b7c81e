"""Measured ceilings of known GPUs and the roofline percentages (torch-free)."""

from __future__ import annotations

# name substring -> ceilings. bytes/s counts bytes read plus written.
CEILINGS = {
    # bench/ceilings.py on the lent H200 (torch 2.11, CUDA 13.0; bench/results/h200-2026-11-30/ceilings.json):
    # device-to-device copy, and the best dense matmul per precision; what a kernel can reach,
    # below the datasheet peaks (4.8 TB/s, 67 TFLOP/s fp32, 989 TFLOP/s bf16 dense)
    "H200": {"bytes_per_s": 4.20e12, "fp32_flops": 50.6e12, "tf32_flops": 384e12,
             "bf16_flops": 751e12, "fp16_flops": 726e12, "source": "measured by bench/ceilings.py on an H200"},
    "H100": {"bytes_per_s": 3.35e12, "fp32_flops": 67e12, "tf32_flops": 378e12,
             "bf16_flops": 756e12, "fp16_flops": 756e12, "source": "datasheet (SXM), not measured here"},
}


def compute_peak(ceil: dict, precision: str) -> float:
    """FLOP/s a kernel can reach at this precision. At fp32 that is SGEMM's rate or a third of TF32's, whichever
    is higher: 3xTF32 (three TF32 products, float32's accuracy; docs/builtin.md) is fp32 math too, and the
    built-in policy runs it (about 128 TFLOP/s on an H200 against SGEMM's 50.6)."""
    if precision == "fp32" and "tf32_flops" in ceil:
        return max(ceil["fp32_flops"], ceil["tf32_flops"] / 3)
    return ceil.get(f"{precision}_flops", ceil["fp32_flops"])


def percentages(roof: dict, time_ms: float, precision: str) -> dict:
    """Achieved fraction of the bandwidth and arithmetic ceilings at time_ms."""
    ceil = roof.get("ceilings")
    if not ceil or not time_ms or "flops" not in roof:
        return {}
    seconds = time_ms / 1e3
    bw = roof["min_bytes"] / seconds / ceil["bytes_per_s"] * 100
    peak = compute_peak(ceil, precision)
    fl = roof["flops"] / seconds / peak * 100
    floor_ms = max(roof["min_bytes"] / ceil["bytes_per_s"], roof["flops"] / peak) * 1e3
    return {"pct_of_bandwidth": round(bw, 2), "pct_of_flops": round(fl, 2), "floor_ms": floor_ms,
            "bound": "memory" if roof["min_bytes"] / ceil["bytes_per_s"] >= roof["flops"] / peak else "compute"}
