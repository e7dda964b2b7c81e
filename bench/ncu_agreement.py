"""Does the profiled time agree with Nsight Compute's kernel time? (target: within 10%)

    python bench/ncu_agreement.py --reference KB/level1/21_Sigmoid.py \
        --candidate bench/candidates/level1_21_Sigmoid --out OUT

1. `profile_step` times the candidate as `kernelsmith profile` does (CUDA events,
   L2 flushed, fresh inputs, median).
2. The same candidate runs 10 times under `ncu --clock-control none` (which
   flushes caches between kernels by default); gpu__time_duration.sum per launch,
   summed over the kernels of one forward, median over the calls.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

CALLS = 10


def child(reference: Path, candidate: Path) -> None:
    """Run under ncu: forward CALLS times on one seeded input."""
    import torch

    from kernelsmith.harness import loading

    task = loading.load_module(reference, "ks_reference")
    module = loading.load_module(candidate, "ks_candidate")
    model = module.ModelNew(*loading.init_inputs(task)).cuda()
    inputs = loading.seeded_inputs(task, 1, "cuda", "fp32")
    for _ in range(CALLS):
        model(*inputs)
    torch.cuda.synchronize()


def ncu_kernel_ms(reference: Path, candidate: Path, kernel: str | None) -> tuple[list[float], str]:
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    only = ["--kernel-name", f"regex:{kernel}"] if kernel else []
    cmd = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv", *only,
           sys.executable, __file__, "--child", "--reference", str(reference), "--candidate", str(candidate)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    rows = [r for r in csv.DictReader(io.StringIO(_csv_part(proc.stdout)))
            if r.get("Metric Name") == "gpu__time_duration.sum"]
    per_kernel = []
    for r in rows:
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        per_kernel.append(value * {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0}.get(unit, 1e-6))
    return per_kernel, proc.stderr[-2000:] + proc.stdout[-2000:]


def _csv_part(text: str) -> str:
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), len(lines))
    return "\n".join(lines[start:])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--kernel", help="regex of the candidate's kernel names (leaves out input generation)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    if args.child:
        return child(args.reference, args.candidate)
    candidate = args.candidate / "model_new.py" if args.candidate.is_dir() else args.candidate
    from kernelsmith.evaluation.options import EvalOptions
    from kernelsmith.evaluation.evaluate import profile_step
    from kernelsmith.evaluation.result import EvalResult

    result = EvalResult(device="cuda")
    profile_step(args.reference.resolve(), candidate.resolve(), EvalOptions(device="cuda", compile_baseline=False),
                 result)
    per_kernel, log = ncu_kernel_ms(args.reference.resolve(), candidate.resolve(), args.kernel)
    kernels_per_call = max(1, len(per_kernel) // CALLS)
    per_call = [sum(per_kernel[i:i + kernels_per_call]) for i in range(0, len(per_kernel), kernels_per_call)]
    ncu_ms = statistics.median(per_call) if per_call else None
    ours = result.timings_ms.get("candidate")
    row = {"task": args.reference.name, "profiled_ms": ours, "ncu_ms": ncu_ms,
           "ratio": (ours / ncu_ms) if ours and ncu_ms else None, "ncu_launches": len(per_kernel),
           "log_tail": log if not per_kernel else ""}
    (args.out / "ncu_agreement.json").write_text(json.dumps(row, indent=1))
    print(f"\nncu agreement on {row['task']}: profiled median {ours} ms, ncu median {ncu_ms} ms, "
          f"ratio {row['ratio']}")
    if not per_kernel:
        print(log)


if __name__ == "__main__":
    main()
