"""Do the harness's baseline timers agree with an independent one? Side by side, in one process.

    python bench/timer_agreement.py TASK.py [TASK.py ...] [--modes eager,default] [--out DIR]

For each task: eager and torch.compile (default mode) timed three ways on the same inputs:
  - settled: the harness's Clocks (a device sync before the start event), as every contender of a
    profile is timed, the candidate and live eager included,
  - queued: the same without that sync (the host's launch overlaps the flush still on the GPU), as the
    trusted baselines worker also times eager and compile (never a candidate: side-stream work could
    run before the start event),
  - do_bench: triton.testing.do_bench (its own 256 MB cache clear before each run, median).
"credited" is the faster of settled and queued: what the baselines worker credits
(evaluation/baselines.credited). Every timer gets TF32 off, no_grad, an L2 flush before each run and
the median of its runs. Prints each timer's median in ms and its difference from do_bench.
Then the trusted baselines worker itself (the `baselines` job a session runs, in its own process) on
the same task: the eager and compile medians it credits, against this process's do_bench.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelsmith.evaluation import runner  # noqa: E402
from kernelsmith.evaluation.baselines import credited  # noqa: E402
from kernelsmith.evaluation.checks import QUEUED  # noqa: E402
from kernelsmith.harness import guards, loading  # noqa: E402
from kernelsmith.harness.profile import InputPool  # noqa: E402
from kernelsmith.harness.timing import Clocks, L2Flusher, summarize  # noqa: E402

RUNS = 200


def harness_median(fn, pool: InputPool, settle: bool) -> float:
    clocks, flusher = Clocks("cuda", settle=settle), L2Flusher("cuda")
    times = []
    for _ in range(RUNS):
        inputs = pool.next()
        flusher.flush()
        times.append(clocks.time_call(fn, inputs)[0])
    return summarize(times)["median"]


def do_bench_median(fn, pool: InputPool) -> float:
    import triton.testing

    inputs = pool.next()
    return float(triton.testing.do_bench(lambda: fn(*inputs), warmup=25, rep=200, return_mode="median"))


def worker_credited(path: Path, modes: list[str]) -> dict:
    """The medians the baselines job (harness/profile.run_baselines, its own process) credits."""
    job = {"kind": "baselines", "reference": str(path.resolve()), "device": "cuda", "precision": "fp32",
           "seed": 7, "compile_modes": [m for m in modes if m != "eager"], "cwd": str(path.parent.resolve())}
    timings = runner.run_job(job, 1200)["timings"]
    return {name: credited(timings, name) for name in timings if not name.endswith(QUEUED)}


def contenders(task, modes: list[str]) -> dict:
    model = loading.seeded_reference(task, 1, "cuda", "fp32")

    def no_grad(f):
        def call(*args):
            with torch.no_grad():
                return f(*args)
        return call

    found = {"eager": no_grad(model)}
    for mode in modes:
        if mode != "eager":
            found[f"compile:{mode}"] = no_grad(torch.compile(model, mode=None if mode == "default" else mode))
    return found


def measure(path: Path, modes: list[str]) -> list[dict]:
    guards.set_precision_flags("fp32")
    task = loading.load_module(path, f"ks_task_{path.stem}")
    pool = InputPool(task, [11, 12, 13, 14], "cuda", "fp32")
    rows = []
    worker = worker_credited(path, modes)
    for name, fn in contenders(task, modes).items():
        for _ in range(3):  # warm-up (and compilation)
            fn(*pool.next())
        torch.cuda.synchronize()
        times = {"do_bench": do_bench_median(fn, pool), "settled": harness_median(fn, pool, True),
                 "queued": harness_median(fn, pool, False)}
        times["credited"] = min(times["settled"], times["queued"])
        times["worker"] = worker[name]
        rows.append({"task": path.stem, "contender": name, **times,
                     **{f"{k}_vs_do_bench": times[k] / times["do_bench"] - 1 for k in ("settled", "queued", "credited", "worker")}})
        print(f"{path.stem[:34]:34} {name:18} do_bench {times['do_bench']:.4f}  " + "  ".join(
            f"{k} {times[k]:.4f} ({rows[-1][k + '_vs_do_bench']:+.1%})" for k in ("settled", "queued", "credited", "worker")),
              flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="+", type=Path)
    parser.add_argument("--modes", default="eager,default")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    print(f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}; median of {RUNS} runs per harness timer")
    rows = [row for task in args.tasks for row in measure(task, args.modes.split(","))]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timer_agreement.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
