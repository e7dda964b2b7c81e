"""What a steady-state evaluation costs beside the compute it times (issue 17's 3x bound).

    python bench/eval_overhead.py REF:CAND [REF:CAND ...] [--device cuda] [--repeats 3] [--out DIR]

Each pair is scored by `kernelsmith eval --json` (real workers, the real jail) once cold, which is
dropped (builds, the op watch, baselines), then --repeats times warm, with one cache folder for the
whole run. For every warm run:

- compute: timed runs x (candidate median + live eager median), the time the profile exists to measure;
- profile: the profile worker's answer (the timed runs, warm-up, spot checks, input rescales, flushes);
- call: the whole `eval` wall time, verify included (what one `profile` tool call costs the agent).

The table gives medians over the warm runs, the timer being time.perf_counter around the subprocess
and the harness's own EvalResult.seconds for its phases. Writes eval_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def score(reference: str, candidate: str, device: str, cache: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kernelsmith.cli", "eval", reference, candidate, "--device", device,
                           "--json"], capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - start
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"wall_s": wall, "error": (proc.stderr or proc.stdout)[-300:]}
    return {"wall_s": wall, **costs(result)}


def costs(result: dict) -> dict:
    """The phases of one evaluation and the compute its profile timed, in seconds."""
    seconds, timings = result.get("seconds") or {}, result.get("timings_ms") or {}
    runs = seconds.get("profile_runs") or 0
    per_run_ms = (timings.get("candidate") or 0) + (timings.get("eager_live") or timings.get("eager") or 0)
    return {"verify_s": seconds.get("verify"), "profile_s": seconds.get("profile"), "runs": runs,
            "compute_s": runs * per_run_ms / 1e3, "correct": result.get("correct"),
            "error": (result.get("error") or "")[:160], "contended": result.get("contended") or ""}


def summary(task: str, warm: list[dict]) -> dict:
    good = [r for r in warm if r.get("compute_s")]
    if not good:
        return {"task": task, "error": (warm[-1].get("error") if warm else "no run")}
    med = {k: statistics.median(r[k] for r in good) for k in ("wall_s", "verify_s", "profile_s", "compute_s")}
    return {"task": task, "n": len(good), **{k: round(v, 2) for k, v in med.items()},
            "profile_over_compute": round(med["profile_s"] / med["compute_s"], 2),
            "call_over_compute": round(med["wall_s"] / med["compute_s"], 2)}


def task_name(reference: str) -> str:
    path = Path(reference)
    return path.parent.name if path.stem == "model" else path.stem


def print_table(rows: list[dict], device: str) -> None:
    print(f"\nkernelsmith eval, warm runs, medians; timer: perf_counter around the subprocess; device {device}; "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'task':32} {'n':>2} {'call s':>7} {'verify s':>8} {'profile s':>9} {'compute s':>9} "
          f"{'profile/compute':>15} {'call/compute':>12}")
    for r in rows:
        if "error" in r:
            print(f"{r['task'][:32]:32} error: {r['error']}")
            continue
        print(f"{r['task'][:32]:32} {r['n']:>2} {r['wall_s']:>7.2f} {r['verify_s']:>8.2f} {r['profile_s']:>9.2f} "
              f"{r['compute_s']:>9.2f} {r['profile_over_compute']:>14.2f}x {r['call_over_compute']:>11.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="+", help="REFERENCE:CANDIDATE")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows, raw = [], {}
    with tempfile.TemporaryDirectory() as cache:
        for pair in args.pairs:
            reference, candidate = pair.split(":")
            task = task_name(reference)
            runs = [score(reference, candidate, args.device, Path(cache)) for _ in range(args.repeats + 1)]
            raw[task] = runs
            rows.append(summary(task, runs[1:]))  # the first run is cold: builds, op watch, baselines
            (args.out / "eval_overhead.json").write_text(json.dumps({"rows": rows, "runs": raw}, indent=1))
    print_table(rows, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
