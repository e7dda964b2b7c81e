"""The built-in policy's CPU kernels for a task, called directly, against eager: a table per task and variant.

    python bench/cpu_kernels.py TASK.py [--runs 30] [--out FILE.json]

One task per call: two tasks' extensions register bindings of the same names (k0_reduction, ...) in one
process, so a loop over tasks runs one process each (docs/builtin.md gives the loop used).

For each task: the plan the built-in policy makes (capture, partition, the CPU generator), built with the
harness's own CPU flags, then every launch variant of the whole plan (each kernel at that variant, views in
between) and eager, alternating, on the task's get_inputs() (seed 0), after a warm-up call each. Each run's wall
time by perf_counter; the table gives the median of --runs per contender, torch's threads as the harness sets
them (torch.get_num_threads()). Every variant's output is checked against eager with the harness's fp32
comparison first. No L2 flush, no fresh inputs: this times the kernels alone, not a harness profile
(`kernelsmith optimize --device cpu` gives that)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from kernelsmith.compiler import cpu
from kernelsmith.compiler.ir import Group
from kernelsmith.compiler.pipeline import build_plan
from kernelsmith.harness import build, loading
from kernelsmith.harness.compare import compare

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from plan_runner import run_plan  # noqa: E402 (the tests' runner of a plan's kernels, as model_new.py runs them)


def built_plan(task_path: Path, root: Path):
    """(the plan, the imported extension) of the task's CPU kernels."""
    built = build_plan(task_path, "cpu", "fp32")
    if built.unsupported:
        raise SystemExit(f"{task_path}: not supported: {built.unsupported}")
    (root / "kernels").mkdir()
    for group in built.plan.groups():
        for name, text in cpu.generate(group, built.plan.values).files.items():
            (root / "kernels" / name).write_text(text)
    result = build.build(root / "kernels", "cpu", build_dir=root / "build")
    if not result.ok:
        raise SystemExit(f"{task_path}: build failed: {result.summary}")
    return built, build.import_extension(result.so_path, result.name)


def timed_ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def measure(task_path: Path, runs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        built, ext = built_plan(task_path, Path(tmp))
        task = loading.load_module(str(task_path), "ks_bench_task")
        model = loading.seeded_reference(task, 0, "cpu", "fp32")
        inputs = loading.seeded_inputs(task, 0, "cpu", "fp32")
        counts = [len(v) for v in built.variants]
        args = dict(zip([v.name for v in built.plan.inputs], inputs))
        args |= {p.name: eval(p.source, {"self": model}) for p in built.plan.params}  # noqa: S307 (the plan's paths)
        with torch.no_grad():
            expected = model(*inputs)
            contenders = {"eager": lambda: model(*inputs)}
            for config in range(max(counts, default=1)):
                got = run_plan(ext, built.plan, args, config, counts)
                verdict = compare(got[0] if len(got) == 1 else tuple(got), expected, "fp32")
                if not verdict["ok"]:
                    raise SystemExit(f"{task_path}: variant {config} is wrong: {verdict['reason']}")
                contenders[f"v{config}"] = lambda c=config: run_plan(ext, built.plan, args, c, counts)
            samples = {name: [] for name in contenders}
            for fn in contenders.values():
                fn()
            for _ in range(runs):
                for name, fn in contenders.items():
                    samples[name].append(timed_ms(fn))
    medians = {name: statistics.median(s) for name, s in samples.items()}
    return {"task": str(task_path), "kernels": len(built.plan.groups()), "median_ms": medians,
            "threads": torch.get_num_threads()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", type=Path)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [measure(args.task, args.runs)]
    variants = [name for name in rows[0]["median_ms"] if name != "eager"]  # as many as the plan's kernels have
    print("| task | kernels | eager ms | " + " | ".join(f"{v} ms (x eager)" for v in variants) + " |")
    print("| --- " * (3 + len(variants)) + "|")
    for row in rows:
        eager = row["median_ms"]["eager"]
        cells = [f"{ms:.3f} ({eager / ms:.2f}x)" for name, ms in row["median_ms"].items() if name != "eager"]
        print(f"| {row['task']} | {row['kernels']} | {eager:.3f} | " + " | ".join(cells) + " |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
