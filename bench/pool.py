"""Throughput and overhead of the local sandbox pool, and what a killed worker does to it.

    python bench/pool.py --reference REF.py --candidate DIR/model_new.py [--jobs 8] [--gpus 0,1] [--out DIR]

1. Bare: `evaluate()` called directly, one job after another (no pool).
2. Pool: the same jobs submitted at once to LocalSandbox with the given GPUs (one job per GPU
   at a time); jobs per hour and the per-job overhead against the bare median.
3. Kill: while the pool runs, one harness worker process is SIGKILLed mid-job; the pool must
   finish every other job, and the killed job must come back failed with a reason.
Prints markdown tables and writes pool.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import threading
import time
from pathlib import Path

from kernelsmith.evaluation.options import EvalOptions

from kernelsmith.evaluation.evaluate import evaluate
from kernelsmith.sandbox.local import LocalSandbox


def bare(reference: Path, candidate: Path, opts: EvalOptions, jobs: int) -> list[float]:
    times = []
    for _ in range(jobs):
        start = time.perf_counter()
        result = evaluate(reference, candidate, opts)
        times.append(time.perf_counter() - start)
        assert result.clean, result.error
    return times


def pooled(reference: Path, candidate: Path, opts: EvalOptions, jobs: int, gpus: list[int],
           kill_one: bool = False) -> dict:
    with LocalSandbox(opts.device, gpus=gpus) as pool:
        start = time.perf_counter()
        futures = [pool.submit_evaluate(reference=reference, candidate=candidate, opts=opts) for _ in range(jobs)]
        killed = _kill_a_worker_soon() if kill_one else None
        results = [f.result() for f in futures]
        wall = time.perf_counter() - start
        stats = pool.stats()
    failed = [r.error[:200] for r in results if not r.clean]
    return {"jobs": jobs, "gpus": gpus, "wall_s": wall, "jobs_per_hour": jobs / wall * 3600,
            "failed": failed, "killed_pid": killed.get("pid") if killed else None, "stats": stats}


def _worker_pids() -> list[int]:
    """Harness worker processes of this bench (they carry KERNELSMITH_JOB_ID in their env)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"KERNELSMITH_JOB_ID=" in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _kill_a_worker_soon(delay_s: float = 8.0) -> dict:
    """SIGKILL one worker a few seconds in (in the middle of a job), from a side thread."""
    done: dict = {}

    def kill():
        time.sleep(delay_s)
        pids = _worker_pids()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            done["pid"] = pids[0]

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    thread.join()
    return done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--gpus", default="0")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    gpus = [int(g) for g in args.gpus.split(",") if g]
    opts = EvalOptions(device=args.device, compile_baseline=False)
    base = bare(args.reference, args.candidate, opts, max(3, args.jobs // 2))
    one = pooled(args.reference, args.candidate, opts, args.jobs, gpus[:1])
    many = pooled(args.reference, args.candidate, opts, args.jobs, gpus) if len(gpus) > 1 else None
    killed = pooled(args.reference, args.candidate, opts, args.jobs, gpus[:1], kill_one=True)
    median = statistics.median(base)
    report = {"bare_s": base, "bare_median_s": median, "pool_1gpu": one, "pool_all": many, "kill": killed}
    print(f"| setting | jobs | wall s | jobs/hour | per-job overhead vs bare median ({median:.1f} s) |")
    print("|---|---|---|---|---|")
    for name, run in (("1 GPU", one), (f"{len(gpus)} GPUs", many)):
        if run:
            per_job = run["wall_s"] / run["jobs"] * len(run["gpus"])
            print(f"| {name} | {run['jobs']} | {run['wall_s']:.1f} | {run['jobs_per_hour']:.0f} | "
                  f"{per_job - median:+.2f} s |")
    print(f"\nkilled worker pid {killed['killed_pid']}: {len(killed['failed'])} of {killed['jobs']} jobs failed: "
          f"{killed['failed']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pool.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
