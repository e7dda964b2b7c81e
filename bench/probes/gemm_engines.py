"""The built-in policy's GEMM engines side by side: cuBLAS SGEMM and each CUTLASS 3xTF32 tile, against eager,
torch.compile and eager with TF32 on (device probe for issue 20: is float32-accurate tensor-core math faster,
and does it pass the judge's fp32 tolerance where plain TF32 does not?).

    python3 bench/probes/gemm_engines.py TASK.py... --out DIR [--runs 30]

Per task, in a process of its own: the task's Model (fp32, TF32 off) is the reference, as the judge's is. The
built-in policy's plan is built once; then ModelNew runs at every variant of its first GEMM kernel (the other
kernels at their defaults). Each way is timed whole (the harness's clock, L2 flushed before each call, median
of --runs after 3 warm-ups) and judged against the reference output with the harness's fp32 comparison
(harness/compare.py: per element and relative L2). Prints a markdown table per task; DIR/gemm_engines.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernel_breakdown import each_in_a_process, timed, write_workdir  # noqa: E402

from kernelsmith.compiler.pipeline import build_plan  # noqa: E402
from kernelsmith.harness.compare import compare  # noqa: E402
from kernelsmith.harness.loading import load_module  # noqa: E402
from kernelsmith.harness.timing import Clocks, L2Flusher  # noqa: E402


def variant_model(root: Path, built, configs: list[int], tag: str):
    path = root / f"model_new_{tag}.py"
    path.write_text(built.model_new(configs))
    sys.path.insert(0, str(root))
    try:
        return load_module(path, f"model_new_{tag}").ModelNew
    finally:
        sys.path.remove(str(root))


def gemm_kernel(built) -> int:
    return next(i for i, names in enumerate(built.variants) if any("sgemm" in n for n in names))


def judged(out, ref) -> str:
    verdict = compare(out, ref, "fp32")
    return ("pass" if verdict["ok"] else "FAIL") + f" (rel L2 {verdict.get('rel_l2_err', float('nan')):.1e})"


def probe(task: Path, out: Path, runs: int) -> dict:
    module = load_module(task, f"task_{task.stem}")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).cuda()  # the mode the harness runs it in (a batch norm's batch
    # statistics, not its running ones: the policy compiled that)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    built = build_plan(task, "cuda", "fp32")
    if built.unsupported:
        return {"task": task.stem, "error": f"unsupported: {built.unsupported}"}
    root = out / "workdir"
    write_workdir(task, built, root)
    g = gemm_kernel(built)
    clocks, flusher, rows = Clocks("cuda"), L2Flusher("cuda"), []
    with torch.no_grad():
        ref = model(*inputs)
        rows.append(("eager", timed(model, inputs, runs, clocks, flusher), "reference"))
        compiled = torch.compile(model)
        rows.append(("torch.compile (default)", timed(compiled, inputs, runs, clocks, flusher), judged(compiled(*inputs), ref)))
        torch.backends.cuda.matmul.allow_tf32 = True
        rows.append(("eager, TF32 on (not fp32)", timed(model, inputs, runs, clocks, flusher), judged(model(*inputs), ref)))
        torch.backends.cuda.matmul.allow_tf32 = False
        for v, name in enumerate(built.variants[g]):
            configs = [0] * len(built.variants)
            configs[g] = v
            mine = variant_model(root, built, configs, f"v{v}")(*module.get_init_inputs()).cuda()
            mine.load_state_dict(model.state_dict())
            rows.append((f"ours {v}: {name}", timed(mine, inputs, runs, clocks, flusher), judged(mine(*inputs), ref)))
    return {"task": task.stem, "summary": built.summary, "rows": rows}


def table(row: dict) -> str:
    if "error" in row:
        return f"### {row['task']}\n\n{row['error']}\n"
    eager = row["rows"][0][1]
    lines = [f"### {row['task']}", "", row["summary"], "", "| way | ms | vs eager | judged at fp32 |", "| --- | --: | --: | --- |"]
    lines += [f"| {way} | {ms:.3f} | {eager / ms:.2f}x | {verdict} |" for way, ms, verdict in row["rows"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    args.out.mkdir(parents=True, exist_ok=True)
    if len(args.tasks) > 1:
        print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, fp32 reference with TF32 off; the "
              f"harness's clock, L2 flushed, median of {args.runs}\n", flush=True)
        each_in_a_process(__file__, args.tasks, args.out, ["--runs", str(args.runs)], "gemm_engines.json")
        return
    try:
        row = probe(args.tasks[0], args.out, args.runs)
    except Exception as err:  # a failed task is a row, not the end of the probe
        row = {"task": args.tasks[0].stem, "error": f"{type(err).__name__}: {err}"[:800]}
    print(table(row), flush=True)
    (args.out / "gemm_engines.json").write_text(json.dumps([row], indent=1))


if __name__ == "__main__":
    main()
