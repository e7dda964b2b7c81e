"""Throughput of the local sandbox pool on one task, as sessions drive it, and what a killed worker does.

    python bench/pool.py --reference REF.py --candidate DIR/model_new.py [--jobs 6] [--gpus 0,1]
        [--evals-per-gpu 1,2,3] [--sharing shared,exclusive] [--no-kill] [--out DIR]

1. Lanes: K lanes share one GPU (K evaluation slots; the GPU's readers-writer lock, gpu_lock.py: verifies
   overlap, a profile has the GPU alone; --sharing exclusive,shared runs each mode side by side).
   A lane is a session: its own copy of the candidate folder (model_new.py and kernels/, built
   and evaluated once untimed), then --jobs evaluations one after another, each after an edit
   (a comment appended to model_new.py), so that every evaluation verifies and profiles: no
   verdict of identical files is recalled. Spare workers are on, as in a session on a GPU. Per K:
   evaluations (verify plus profile) per GPU-hour, seconds per evaluation, and the candidate's
   median time and spread, which sharing must leave as they were. K=1 is one session alone.
2. Kill: while the pool runs, one harness worker process is SIGKILLed mid-job; the pool must
   finish every other job, and the killed job must come back failed with a reason.
Prints markdown tables and writes pool.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from kernelsmith.evaluation import gpu_lock
from kernelsmith.evaluation.options import EvalOptions

from kernelsmith.sandbox.local import LocalSandbox


def lane_copies(candidate: Path, lanes: int, root: Path) -> list[Path]:
    """One folder per lane, as each session has its workdir: the candidate and its kernels/."""
    copies = []
    for lane in range(lanes):
        folder = root / f"lane{lane}"
        shutil.copytree(candidate.parent, folder, ignore=shutil.ignore_patterns("build", "__pycache__", ".kernelsmith"))
        copies.append(folder / candidate.name)
    return copies


def edit(candidate: Path, n: int) -> None:
    """An edit whose verify no earlier verdict covers: an agent's one-line change, minus the change."""
    with open(candidate, "a") as f:
        f.write(f"# edit {n}\n")


def lanes_run(reference: Path, candidate: Path, opts: EvalOptions, jobs: int, evals_per_gpu: int,
              gpus: list[int], root: Path) -> dict:
    """evals_per_gpu lanes on the first GPU, each `jobs` edits and evaluations in a row."""
    copies = lane_copies(candidate, evals_per_gpu * len(gpus), root / f"k{evals_per_gpu}")
    with LocalSandbox(opts.device, gpus=gpus, evals_per_gpu=evals_per_gpu) as pool:
        for copy in copies:  # untimed: its build, baselines and first spares, as in a session under way
            first = pool.submit_evaluate(reference=reference, candidate=copy, opts=opts).result()
            assert first.clean, first.error
            progress(f"{copy.parent.name} set up: {_brief(first.seconds)}")
        results: list = []
        start = time.perf_counter()
        threads = [threading.Thread(target=_lane, args=(pool, reference, copy, opts, jobs, results)) for copy in copies]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start
        stats = pool.stats()
    return {"lanes": len(copies), "evals_per_gpu": evals_per_gpu, "gpus": gpus, "jobs": len(results),
            "wall_s": wall, "evals_per_gpu_hour": len(results) / wall * 3600 / len(gpus),
            "s_per_eval": wall * len(gpus) / len(results), "failed": [r.error[:200] for r in results if not r.clean],
            "verified": sum("verify.candidate" in r.seconds for r in results), **_medians(results), "stats": stats}


def _lane(pool, reference: Path, candidate: Path, opts: EvalOptions, jobs: int, results: list) -> None:
    for n in range(jobs):
        edit(candidate, n)
        results.append(pool.submit_evaluate(reference=reference, candidate=candidate, opts=opts).result())
        progress(f"{candidate.parent.name} evaluation {n + 1}: {_brief(results[-1].seconds)}")


START = time.perf_counter()


def progress(line: str) -> None:
    """A line on stderr as each step ends: a call cut off by its time limit still shows where the time went."""
    print(f"[{time.perf_counter() - START:7.1f} s] {line}", file=sys.stderr, flush=True)


def _brief(seconds: dict) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in seconds.items() if k in ("build", "verify", "profile", "baselines"))


PHASES = ("verify", "verify.candidate", "verify.judge", "verify.candidate.ready_wait", "verify.judge.ready_wait",
          "profile", "profile.ready_wait", "profile.worker.timed", "profile.checksums",
          "verify.candidate.lock_wait", "verify.candidate.lock_held", "verify.judge.lock_wait", "verify.judge.lock_held",
          "profile.lock_wait", "profile.lock_held", "profile.checksums.lock_wait", "profile.checksums.lock_held")


def _medians(results: list) -> dict:
    """The candidate's medians, and the median seconds of the phases where an evaluation's time goes
    (profile.ready_wait: its profile worker's imports still running when the job came, lock not held)."""
    medians = [r.timings_ms["candidate"] for r in results if r.timings_ms.get("candidate")]
    phases = {name: statistics.median(v) for name in PHASES
              if (v := [r.seconds[name] for r in results if isinstance(r.seconds.get(name), (int, float))])}
    return {"candidate_ms": medians, "contended": sum(bool(r.contended) for r in results), "phase_s": phases}


def killed_run(reference: Path, candidate: Path, opts: EvalOptions, jobs: int, gpus: list[int]) -> dict:
    """The same files `jobs` times at once, one worker SIGKILLed a few seconds in."""
    with LocalSandbox(opts.device, gpus=gpus[:1]) as pool:
        futures = [pool.submit_evaluate(reference=reference, candidate=candidate, opts=opts) for _ in range(jobs)]
        killed = _kill_a_worker_soon()
        results = [f.result() for f in futures]
    return {"jobs": jobs, "failed": [r.error[:200] for r in results if not r.clean], "killed_pid": killed.get("pid")}


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
    parser.add_argument("--jobs", type=int, default=6, help="evaluations per lane")
    parser.add_argument("--gpus", default="0")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--evals-per-gpu", default="1,2", help="comma-separated: one run per value")
    parser.add_argument("--sharing", default="shared",
                        help="comma-separated GPU lock modes, one set of runs each: shared (verifies overlap, "
                             "gpu_lock.py) and exclusive (every job alone on the GPU)")
    parser.add_argument("--compile", action="store_true",
                        help="time the torch.compile baselines too: measured once per task by the first lane's "
                             "set-up and cached, so they only lengthen the set-up (minutes with max-autotune)")
    parser.add_argument("--no-kill", action="store_true", help="skip the killed-worker run")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    gpus = [int(g) for g in args.gpus.split(",") if g]
    opts = EvalOptions(device=args.device, spare_workers=True, compile_baseline=args.compile)
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, lanes, on, sharing in run_plan(args.evals_per_gpu, args.sharing, gpus):
            os.environ["KERNELSMITH_GPU_SHARING"] = sharing  # read by this process's runner, per job
            runs[name] = {**lanes_run(args.reference, args.candidate, opts, args.jobs, lanes, on, Path(tmp) / sharing),
                          "sharing": sharing}
            save(args.out, runs, None)  # each run as it ends: a call cut off by its time limit keeps the runs done
            print(table({name: runs[name]}), flush=True)
    killed = None if args.no_kill else killed_run(args.reference, args.candidate, opts, args.jobs, gpus)
    print(table(runs))
    if killed:
        print(f"\nkilled worker pid {killed['killed_pid']}: {len(killed['failed'])} of {killed['jobs']} jobs failed: "
              f"{killed['failed']}")
    save(args.out, runs, killed)


def run_plan(evals_per_gpu: str, sharing: str, gpus: list[int]) -> list[tuple[str, int, list[int], str]]:
    """(name, lanes, GPUs, lock mode) of each run: the lane counts on one GPU, then all GPUs, per mode."""
    plan = []
    for mode in (m.strip() for m in sharing.split(",") if m.strip()):
        plan += [(f"{k} per GPU, {mode}", k, gpus[:1], mode) for k in (int(k) for k in evals_per_gpu.split(",") if k)]
        if len(gpus) > 1:
            plan.append((f"{len(gpus)} GPUs, 1 per GPU, {mode}", 1, gpus, mode))
    return plan


def save(out: Path, runs: dict, killed) -> None:
    (out / "pool.json").write_text(json.dumps({"pools": runs, "kill": killed}, indent=1, default=str))


def table(runs: dict) -> str:
    lines = ["| lanes | evaluations | verified | wall s | evaluations per GPU-hour | s per evaluation | "
             "candidate ms (median, min-max) | profile waited for imports s | GPU lock held per evaluation s "
             "(shared + exclusive) | contended | failed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, run in runs.items():
        times = run["candidate_ms"] or [0.0]
        lines.append(f"| {name} | {run['jobs']} | {run['verified']} | {run['wall_s']:.1f} | "
                     f"{run['evals_per_gpu_hour']:.0f} | {run['s_per_eval']:.2f} | {statistics.median(times):.4f} "
                     f"({min(times):.4f}-{max(times):.4f}) | {run['phase_s'].get('profile.ready_wait', '-')} | "
                     f"{_held(run['phase_s'], run['sharing'], True):.2f} + {_held(run['phase_s'], run['sharing'], False):.2f} | "
                     f"{run['contended']} | {len(run['failed'])} |")
    return "\n".join(lines)


def _held(phases: dict, mode: str, shared: bool) -> float:
    """Median seconds per evaluation the lock was held shared, or exclusively, by the jobs of a run in this
    lock mode; a phase is named after its job ("verify.judge.lock_held", "profile.lock_held")."""
    def held_shared(name: str) -> bool:
        return mode != "exclusive" and name.split(".")[-2] in gpu_lock.SHARED_JOBS

    return sum(v for k, v in phases.items() if k.endswith("lock_held") and held_shared(k) == shared)


if __name__ == "__main__":
    main()
