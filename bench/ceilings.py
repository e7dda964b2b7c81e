"""Measure the GPU's ceilings used by the roofline: copy bandwidth and matrix rates.

    python bench/ceilings.py

Method: CUDA events, 3 warm-ups, median of 20; copy counts bytes read plus written;
matrix products 8192^3 on random data; fp32 with TF32 off (torch.backends flags).
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

import torch


def median_ms(fn, repeats: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth() -> float:
    src = torch.randn(1 << 30, device="cuda")  # 4 GiB
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / (ms / 1e3)


def matmul_rate(dtype, tf32: bool) -> float:
    torch.backends.cuda.matmul.allow_tf32 = tf32
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms = median_ms(lambda: a @ b)
    torch.backends.cuda.matmul.allow_tf32 = False
    return 2 * n ** 3 / (ms / 1e3)


def main() -> None:
    row = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "copy_bytes_per_s": copy_bandwidth(),
           "fp32_flops": matmul_rate(torch.float32, tf32=False),
           "tf32_flops": matmul_rate(torch.float32, tf32=True),
           "bf16_flops": matmul_rate(torch.bfloat16, tf32=False),
           "fp16_flops": matmul_rate(torch.float16, tf32=False)}
    out = Path(os.environ.get("OUT", "."))
    (out / "ceilings.json").write_text(json.dumps(row, indent=1))
    print(f"\nceilings on {row['gpu']} (torch {row['torch']}; CUDA events, median of 20)")
    print(f"  copy bandwidth (read+write)  {row['copy_bytes_per_s'] / 1e12:8.2f} TB/s")
    for key in ("fp32_flops", "tf32_flops", "bf16_flops", "fp16_flops"):
        print(f"  {key:28s} {row[key] / 1e12:8.1f} TFLOP/s")


if __name__ == "__main__":
    main()
