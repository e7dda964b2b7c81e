"""A steady-state `profile` tool call against the compute it times, in a scripted session (issue 17's 3x bound).

    python bench/profile_overhead.py TASK.py CANDIDATE_DIR [--device cpu|cuda] [--profiles 3] [--out DIR]

CANDIDATE_DIR holds model_new.py and kernels/. One KernelEnv session in a fresh workdir (real builds,
the real jailed workers, the session's spares as `optimize` has them): write the candidate, compile,
verify, profile (the session's first, dropped), then --profiles times: edit the first kernel source (a
comment line, so no verdict is recalled), compile, verify, profile. For each steady profile:

- call: the `profile` step's wall time (time.perf_counter around KernelEnv.step);
- compute: the timed runs x (candidate median + live eager median), from its EvalResult;
- the profile's phases from EvalResult.seconds (its worker's import wait, calibration, timed runs,
  the checksums job).

Prints a table of the steady profiles and their medians; writes profile_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("profile.ready_wait", "profile.worker.calibrate", "profile.worker.timed", "profile.checksums")


def step(env, name: str, **arguments):
    from kernelsmith.backends.base import Reply, ToolCall

    call = ToolCall(f"c{len(env.messages)}", name, arguments)
    env.model_turn(Reply("", [call]))
    start = time.perf_counter()
    obs = env.step_all([call])[-1]
    return obs, time.perf_counter() - start


def row(obs, wall: float) -> dict:
    result = obs.eval or {}
    seconds, timings = result.get("seconds") or {}, result.get("timings_ms") or {}
    runs = seconds.get("profile_runs") or 0
    compute = runs * ((timings.get("candidate") or 0) + (timings.get("eager_live") or timings.get("eager") or 0)) / 1e3
    return {"call_s": round(wall, 3), "compute_s": round(compute, 3), "runs": runs,
            "ratio": round(wall / compute, 2) if compute else None,
            "clean": bool(result.get("correct") and not result.get("violations")),  # (EvalResult.clean, a property)
            **{p: seconds.get(p) for p in PHASES},
            **{k: v for k, v in seconds.items() if k.startswith("profile.worker.timed.")}}  # the loop's parts


def session(task: Path, candidate: Path, device: str, profiles: int, root: Path) -> list[dict]:
    from kernelsmith import workdir as wd
    from kernelsmith.agent.env import KernelEnv
    from kernelsmith.config import Settings
    from kernelsmith.task import TaskSource

    path = root / "wd"
    wd.create(TaskSource(name=task.stem, source=task.read_text(), origin=str(task)), path, device)
    env = KernelEnv(Settings(max_turns=4 * (profiles + 2)))
    env.reset(path)
    step(env, "bash", command="rm -f kernels/example_scale*")
    sources = sorted(p for p in (candidate / "kernels").iterdir() if p.is_file())
    for source in sources:
        step(env, "write_file", path=f"kernels/{source.name}", content=source.read_text())
    step(env, "write_file", path="model_new.py", content=(candidate / "model_new.py").read_text())
    edited, rows = sources[0], []
    for n in range(profiles + 1):
        step(env, "write_file", path=f"kernels/{edited.name}", content=edited.read_text() + f"\n// edit {n}\n")
        built, _ = step(env, "compile")
        if not built.build["ok"]:
            raise SystemExit(f"the build failed: {built.build['summary']}")
        step(env, "verify")
        rows.append(row(*step(env, "profile")))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    env.close("finish")
    return rows[1:]  # the session's first profile is not steady: dropped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", type=Path)
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--profiles", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = session(args.task.resolve(), args.candidate.resolve(), args.device, args.profiles, Path(tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile_overhead.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{args.task.name} on {args.device}, steady profiles of a scripted session; timer: perf_counter around "
          f"the step; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'call s':>7} {'compute s':>9} {'runs':>5} {'call/compute':>12} {'ready wait':>10} {'calibrate':>9} "
          f"{'timed':>6} {'checksums':>9}")
    for r in rows:
        print(f"{r['call_s']:>7.2f} {r['compute_s']:>9.2f} {r['runs']:>5} {r['ratio'] or 0:>11.2f}x "
              + " ".join(f"{r[p] or 0:>{w}.2f}" for p, w in zip(PHASES, (10, 9, 6, 9))))
    good = [r["ratio"] for r in rows if r["ratio"]]
    if good:
        print(f"median call/compute: {statistics.median(good):.2f}x over {len(good)} steady profiles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
