"""Cost of moving one candidate output from the candidate worker to the judge.

    python bench/transfer_cost.py [--gb 1.6] [--dir /dev/shm]

Compares torch.save + torch.load (the old path) with kernelsmith.harness.transfer
(raw bytes through a pinned buffer, mapped by the judge). Uses CUDA when present.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from kernelsmith.harness import transfer


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=1.6)
    parser.add_argument("--dir", type=Path, default=Path("/dev/shm"))
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.rand(int(args.gb * 1e9 / 4), device=device)
    raw, pt = args.dir / "ks_transfer.bin", args.dir / "ks_transfer.pt"
    rows = []
    save_s, _ = timed(lambda: transfer.save_outputs([x], raw))
    load_s, ok = timed(lambda: torch.equal(transfer.load_outputs(raw)[0].to(device), x))
    rows.append(("raw + pinned staging (now)", save_s, load_s, ok))
    save_s, _ = timed(lambda: torch.save([x.to("cpu", copy=True)], pt))
    load_s, ok = timed(lambda: torch.equal(torch.load(pt, weights_only=True, map_location=device)[0], x))
    rows.append(("torch.save / torch.load (before)", save_s, load_s, ok))
    for path in (raw, Path(str(raw) + ".json"), pt):
        path.unlink(missing_ok=True)
    print(f"{args.gb} GB fp32 on {device}, files in {args.dir}, torch {torch.__version__}")
    print(f"| path | save s | load + compare s | equal |\n|---|---|---|---|")
    for name, save_s, load_s, ok in rows:
        print(f"| {name} | {save_s:.2f} | {load_s:.2f} | {ok} |")


if __name__ == "__main__":
    main()
