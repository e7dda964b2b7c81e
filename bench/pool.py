"""Throughput and overhead of the local sandbox pool, and what a killed worker does to it.

    python bench/pool.py --reference REF.py --candidate DIR/model_new.py [--jobs 8] [--gpus 0,1]
        [--evals-per-gpu 1,2] [--no-kill] [--out DIR]

1. Bare: `evaluate()` called directly, one job after another (no pool).
2. Pool: the same jobs submitted at once to LocalSandbox with the given GPUs, once per
   --evals-per-gpu value (K evaluations share a GPU, their jobs one at a time: runner.compute_lock);
   jobs per hour, the per-job overhead against the bare median, and the candidate's median time
   and spread, which sharing must leave as they were.
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
           kill_one: bool = False, evals_per_gpu: int = 1) -> dict:
    with LocalSandbox(opts.device, gpus=gpus, evals_per_gpu=evals_per_gpu) as pool:
        start = time.perf_counter()
        futures = [pool.submit_evaluate(reference=reference, candidate=candidate, opts=opts) for _ in range(jobs)]
        killed = _kill_a_worker_soon() if kill_one else None
        results = [f.result() for f in futures]
        wall = time.perf_counter() - start
        stats = pool.stats()
    failed = [r.error[:200] for r in results if not r.clean]
    medians = [r.timings_ms["candidate"] for r in results if r.timings_ms.get("candidate")]
    return {"jobs": jobs, "gpus": gpus, "evals_per_gpu": evals_per_gpu, "wall_s": wall,
            "jobs_per_hour": jobs / wall * 3600, "candidate_ms": medians,
            "contended": sum(bool(r.contended) for r in results),
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
    parser.add_argument("--evals-per-gpu", default="1", help="comma-separated: one pooled run per value")
    parser.add_argument("--no-kill", action="store_true", help="skip the killed-worker run")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    gpus = [int(g) for g in args.gpus.split(",") if g]
    opts = EvalOptions(device=args.device, compile_baseline=False)
    base = bare(args.reference, args.candidate, opts, max(3, args.jobs // 2))
    shares = [int(k) for k in args.evals_per_gpu.split(",") if k]
    runs = {f"1 GPU, {k} per GPU": pooled(args.reference, args.candidate, opts, args.jobs, gpus[:1], evals_per_gpu=k)
            for k in shares}
    if len(gpus) > 1:
        runs[f"{len(gpus)} GPUs"] = pooled(args.reference, args.candidate, opts, args.jobs, gpus)
    killed = None if args.no_kill else pooled(args.reference, args.candidate, opts, args.jobs, gpus[:1], kill_one=True)
    median = statistics.median(base)
    report = {"bare_s": base, "bare_median_s": median, "pools": runs, "kill": killed}
    print(f"| setting | jobs | wall s | jobs/hour | per-job overhead vs bare median ({median:.1f} s) | "
          "candidate ms (median of medians, min-max) | contended |")
    print("|---|---|---|---|---|---|---|")
    for name, run in runs.items():
        per_job = run["wall_s"] / run["jobs"] * len(run["gpus"])
        times = run["candidate_ms"] or [0.0]
        print(f"| {name} | {run['jobs']} | {run['wall_s']:.1f} | {run['jobs_per_hour']:.0f} | {per_job - median:+.2f} s | "
              f"{statistics.median(times):.4f} ({min(times):.4f}-{max(times):.4f}) | {run['contended']} |")
    if killed:
        print(f"\nkilled worker pid {killed['killed_pid']}: {len(killed['failed'])} of {killed['jobs']} jobs failed: "
              f"{killed['failed']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "pool.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
