"""Do the harness's baseline timers agree with an independent one? Side by side, in one process.

    python bench/timer_agreement.py TASK.py [TASK.py ...] [--modes eager,default] [--out DIR]

For each task: eager and torch.compile (default mode) timed three ways on the same inputs, in
random order of task-contender pairs:
  - v2: the harness's Clocks (a device sync before the start event; harness v3 keeps this),
  - v3: the same without that sync (the host's launch overlaps the flush), the variant tried and dropped:
    it lets side-stream work run before the start event,
  - do_bench: triton.testing.do_bench (its own 256 MB cache clear before each run, median).
Every timer gets TF32 off, no_grad, an L2 flush before each run and the median of its runs. Prints
a table of medians in ms and each harness timer's difference from do_bench.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
    for name, fn in contenders(task, modes).items():
        for _ in range(3):  # warm-up (and compilation)
            fn(*pool.next())
        torch.cuda.synchronize()
        times = {"do_bench": do_bench_median(fn, pool), "v2": harness_median(fn, pool, True),
                 "v3": harness_median(fn, pool, False)}
        rows.append({"task": path.stem, "contender": name, **times,
                     "v2_vs_do_bench": times["v2"] / times["do_bench"] - 1,
                     "v3_vs_do_bench": times["v3"] / times["do_bench"] - 1})
        print(f"{path.stem[:34]:34} {name:18} do_bench {times['do_bench']:.4f}  v2 {times['v2']:.4f} "
              f"({rows[-1]['v2_vs_do_bench']:+.1%})  v3 {times['v3']:.4f} ({rows[-1]['v3_vs_do_bench']:+.1%})",
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
