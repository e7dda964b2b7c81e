"""What one timed run of a profile costs, part by part, on a task's real inputs (issue 17's overhead bound).

    python bench/loop_parts.py TASK.py [--device cuda|cpu] [--runs 20]

Outside any worker or jail: the harness's own functions on the device, each part timed alone, with a
device sync on both sides of it (time.perf_counter; median of --runs after 3 untimed calls): the fresh
draw (loading.seeded_inputs under a new seed), the L2 flush (timing.L2Flusher), eager's call, and the
output checksum (profile.checksum) beside the one-pass alternative (torch.var_mean per row) with the
same result. The ratio column is each part over eager's call: on a memory-bound task the draw and the
checksum are as large as the compute they bracket.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from kernelsmith.harness import loading, profile
from kernelsmith.harness.timing import L2Flusher


def timed(device: str, fn, runs: int) -> float:
    """Median wall milliseconds of fn(i), synchronised on both sides."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    samples = []
    for i in range(runs + 3):
        sync()
        start = time.perf_counter()
        fn(i)
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples[3:])


def one_pass(out: torch.Tensor) -> list[float]:
    """The checksum's sum and norm from one read: per-row mean and variance (Welford), combined in float64."""
    flat = out.reshape(-1)
    whole = flat.numel() // profile.CHECKSUM_ROW * profile.CHECKSUM_ROW
    rows, tail = flat[:whole].view(-1, profile.CHECKSUM_ROW), flat[whole:].to(torch.float64)
    var, mean = torch.var_mean(rows, dim=1, correction=0)
    n = profile.CHECKSUM_ROW
    total = mean.to(torch.float64).sum() * n + tail.sum()
    squares = (var.to(torch.float64) + mean.to(torch.float64).square()).sum() * n + tail.square().sum()
    return [float(total), float(squares) ** 0.5, out.numel()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    task = loading.load_module(args.task, "ks_reference")
    model = loading.seeded_reference(task, 1, args.device, "fp32")
    inputs = loading.seeded_inputs(task, 1, args.device, "fp32")
    flusher = L2Flusher(args.device)
    with torch.no_grad():
        out = model(*inputs)
        parts = {
            "draw (seeded_inputs)": lambda i: loading.seeded_inputs(task, 100 + i, args.device, "fp32"),
            "L2 flush": lambda i: flusher.flush(),
            "eager call": lambda i: model(*inputs),
            "checksum (sum + norm)": lambda i: profile.checksum(out),
            "checksum (one pass)": lambda i: one_pass(out),
        }
        ms = {name: timed(args.device, fn, args.runs) for name, fn in parts.items()}
    print(f"{args.task} on {torch.cuda.get_device_name(0) if args.device == 'cuda' else 'cpu'}, torch "
          f"{torch.__version__}, output {out.numel() * out.element_size() / 1e9:.2f} GB; median of {args.runs}")
    print("| part | ms | x eager call |\n| --- | --- | --- |")
    for name, value in ms.items():
        print(f"| {name} | {value:.3f} | {value / ms['eager call']:.2f} |")
    a, b = profile.checksum(out), one_pass(out)
    print(f"checksums agree: sum {a[0]:.9g} vs {b[0]:.9g}, norm {a[1]:.9g} vs {b[1]:.9g}")


if __name__ == "__main__":
    main()
