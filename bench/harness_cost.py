"""The harness's own cost and stability on a level-1 task, on the GPU.

    python bench/harness_cost.py --reference KB/level1/21_Sigmoid.py \
        --candidate bench/candidates/level1_21_Sigmoid --out OUT

Measures, with real workers: build cold, build cached, a one-line .cu change;
verify; profile (candidate vs eager; compile baselines cold then cached); the
whole `kernelsmith eval`; and stability (5 profiles of the same kernel: max/min
of the medians). Prints a table; writes harness_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kernelsmith.evaluation.options import EvalOptions

from kernelsmith.evaluation.evaluate import build_step, profile_step, verify_step
from kernelsmith.evaluation import runner
from kernelsmith.evaluation.result import EvalResult


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def build_once(kernels: Path) -> dict:
    return runner.run_job({"kind": "build", "kernels_dir": str(kernels), "device": "cuda"}, 1800)


def one_line_change(kernels: Path) -> None:
    cu = next(kernels.glob("*.cu"))
    text = cu.read_text()
    cu.write_text(text.replace("#define SIGMOID_THREADS 256", "#define SIGMOID_THREADS 512", 1)
                  if "SIGMOID_THREADS 256" in text else text + "\n// one-line change\n")


def measure_builds(work: Path) -> dict:
    kernels = work / "kernels"
    cold_s, cold = timed(lambda: build_once(kernels))
    cached_s, cached = timed(lambda: build_once(kernels))
    one_line_change(kernels)
    change_s, changed = timed(lambda: build_once(kernels))
    assert cold["ok"] and cached["cached"] and changed["ok"] and not changed["cached"], (cold, cached, changed)
    return {"build_cold_s": cold_s, "build_cached_s": cached_s, "build_one_line_cu_change_s": change_s,
            "worker_build_cold_s": cold["seconds"], "worker_build_cached_s": cached["seconds"],
            "worker_build_one_line_s": changed["seconds"]}


def measure_steps(reference: Path, candidate: Path) -> dict:
    opts = EvalOptions(device="cuda", compile_baseline=True)
    result = EvalResult(device="cuda")
    verify_s, ok = timed(lambda: verify_step(reference, candidate, opts, result))
    assert ok, result.error
    cold_s, _ = timed(lambda: profile_step(reference, candidate, opts, result))
    cold = dict(result.seconds)
    warm_s, _ = timed(lambda: profile_step(reference, candidate, opts, result))
    return {"verify_s": verify_s, "profile_with_compile_cold_s": cold_s, "profile_cold_split": cold,
            "profile_with_compile_cached_s": warm_s, "profile_cached_split": dict(result.seconds),
            "timings_ms": result.timings_ms, "speedup_vs_eager": result.speedup_vs_eager,
            "speedup_vs_compile": result.speedup_vs_compile, "roofline": result.roofline,
            "violations": result.violations}


def measure_verify(reference: Path, candidate: Path) -> dict:
    result = EvalResult(device="cuda")
    verify_s, ok = timed(lambda: verify_step(reference, candidate, EvalOptions(device="cuda"), result))
    return {"verify_s": verify_s, "verify_ok": ok, "verify_error": result.error[:300],
            "max_abs_err": max((t.get("max_abs_err", 0) for t in result.trials), default=None)}


def measure_eval_cli(reference: Path, candidate: Path) -> dict:
    cmd = [sys.executable, "-m", "kernelsmith.cli", "eval", str(reference), str(candidate), "--device", "cuda",
           "--json"]
    wall, proc = timed(lambda: subprocess.run(cmd, capture_output=True, text=True))
    data = json.loads(proc.stdout)
    return {"eval_cli_wall_s": wall, "eval_exit_code": proc.returncode, "eval_seconds": data["seconds"],
            "eval_reward": data["reward"]}


def measure_stability(reference: Path, candidate: Path, repeats: int = 5) -> dict:
    medians, eager = [], []
    for _ in range(repeats):
        result = EvalResult(device="cuda")
        profile_step(reference, candidate, EvalOptions(device="cuda", compile_baseline=False), result)
        medians.append(result.timings_ms["candidate"])
        eager.append(result.timings_ms["eager"])
    return {"candidate_medians_ms": medians, "candidate_max_over_min": max(medians) / min(medians),
            "eager_medians_ms": eager, "eager_max_over_min": max(eager) / min(eager)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True, help="folder with model_new.py and kernels/")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--steps", default="builds,steps,stability",
                        help="comma list of: builds, steps (verify + profile with compile), verify, stability, cli")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "cand"
        shutil.copytree(args.candidate, work)
        os.environ["KERNELSMITH_BUILD_DIR"] = str(Path(tmp) / "build")
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        row = {"task": args.reference.name}
        ref, cand = args.reference.resolve(), work / "model_new.py"
        available = {"builds": lambda: measure_builds(work), "stability": lambda: measure_stability(ref, cand),
                     "verify": lambda: measure_verify(ref, cand), "steps": lambda: measure_steps(ref, cand),
                     "cli": lambda: measure_eval_cli(ref, cand)}
        for step in [available[name] for name in args.steps.split(",")]:  # each result is saved as it exists
            row.update(step())
            (args.out / "harness_cost.json").write_text(json.dumps(row, indent=1, default=str))
            print(json.dumps(row, default=str)[-600:], flush=True)
    print_table(row)


def print_table(row: dict) -> None:
    print(f"\nharness cost on {row['task']} (H200; wall seconds from the parent, real workers)")
    for key in ("build_cold_s", "build_cached_s", "build_one_line_cu_change_s", "verify_s",
                "profile_with_compile_cold_s", "profile_with_compile_cached_s", "eval_cli_wall_s"):
        if key in row:
            print(f"  {key:34s} {row[key]:8.2f}")
    if "profile_cold_split" in row:
        print(f"  profile split (cold): {row['profile_cold_split']}; timings_ms: {row['timings_ms']}")
    if "candidate_medians_ms" in row:
        print(f"  stability: candidate medians {['%.4f' % m for m in row['candidate_medians_ms']]} "
          f"max/min {row['candidate_max_over_min']:.4f}; eager max/min {row['eager_max_over_min']:.4f}")


if __name__ == "__main__":
    main()
