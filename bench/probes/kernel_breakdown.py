"""Where does each way spend its time? Eager, torch.compile and the built-in policy's kernels, kernel by kernel
(device probe for issue 20: which kernels of a task lose to torch.compile, and what Inductor does instead).

    python3 bench/probes/kernel_breakdown.py TASK.py... --out DIR [--runs 20] [--device cpu]

For each task, in one process: the task's Model (fp32, TF32 off), torch.compile of it (default mode), and the
built-in policy's ModelNew with its default variants, written to a workdir and built as a session would.
Each is timed whole (the harness's clock, L2 flushed before each call, median of --runs) and then run under
torch.profiler for 5 calls, whose CUDA kernels are summed by name (time per call). Inductor's generated code
is saved to DIR/<task>_inductor.py, so its layouts (channels_last convolutions, say) can be read there.
Prints a markdown table per task and writes DIR/breakdown.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import warnings
from collections import defaultdict
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
from kernelsmith.compiler.pipeline import build_plan  # noqa: E402
from kernelsmith.harness.loading import load_module  # noqa: E402
from kernelsmith.harness.timing import Clocks, L2Flusher  # noqa: E402


def write_workdir(task: Path, built, root: Path) -> None:
    """The task as model.py and the plan's kernel files in kernels/, as a session's workdir holds them."""
    (root / "kernels").mkdir(parents=True)
    (root / "model.py").write_text(task.read_text())
    for name, text in built.files.items():
        (root / "kernels" / name).write_text(text)


def each_in_a_process(script: str, tasks: list[Path], out: Path, args: list[str], rows_file: str) -> None:
    """Runs `script` on each task in a process of its own (two tasks' extensions name their bindings alike:
    k0_conv), each writing out/<task>/<rows_file>, and gathers their rows into out/<rows_file>."""
    rows = []
    for task in tasks:
        subprocess.run([sys.executable, script, str(task), "--out", str(out / task.stem), *args], check=False)
        done = out / task.stem / rows_file
        rows += json.loads(done.read_text()) if done.exists() else [{"task": task.stem, "error": "no row"}]
    (out / rows_file).write_text(json.dumps(rows, indent=1))


def ours(task: Path, device: str):
    """ModelNew's class from a workdir the built-in policy's default variants are written to."""
    built = build_plan(task, device, "fp32")
    if built.unsupported:
        raise RuntimeError(f"unsupported: {built.unsupported}")
    root = Path(tempfile.mkdtemp(prefix="ks-breakdown-"))
    write_workdir(task, built, root)
    (root / "model_new.py").write_text(built.model_new([0] * len(built.variants)))
    sys.path.insert(0, str(root))
    sys.modules.pop("model", None)
    try:
        return load_module(root / "model_new.py", f"model_new_{task.stem}").ModelNew, built.summary
    finally:
        sys.path.remove(str(root))


def per_kernel(fn, inputs, device: str, calls: int = 5) -> dict[str, float]:
    """Time per call of each kernel name (ms), from torch.profiler: CUDA kernels, or on the CPU its ops."""
    cuda = device == "cuda"
    activity = torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU
    with torch.profiler.profile(activities=[activity]) as prof:
        for _ in range(calls):
            fn(*inputs)
        if cuda:
            torch.cuda.synchronize()
    found = defaultdict(float)
    for event in prof.key_averages() if not cuda else prof.events():
        if not cuda:
            found[event.key[:90]] += event.self_cpu_time_total / 1000 / calls
        elif event.device_type == torch.autograd.DeviceType.CUDA:
            found[event.name[:90]] += event.device_time_total / 1000 / calls
    return dict(sorted(found.items(), key=lambda kv: -kv[1]))


def timed(fn, inputs, runs: int, clocks: Clocks, flusher: L2Flusher) -> float:
    for _ in range(3):
        fn(*inputs)
    samples = []
    for _ in range(runs):
        flusher.flush()
        samples.append(clocks.time_call(fn, inputs)[0])
    return statistics.median(samples)


def inductor_code(compiled, inputs) -> str:
    from torch._inductor.utils import run_and_get_code

    _, codes = run_and_get_code(compiled, *inputs)
    return "\n\n# ----\n\n".join(codes)


def breakdown(task: Path, out: Path, runs: int, device: str) -> dict:
    name = task.parent.name if task.stem == "model" else task.stem  # an example's folder names it
    module = load_module(task, f"task_{name}")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(device).eval()
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    new_class, summary = ours(task, device)
    torch.manual_seed(0)
    mine = new_class(*module.get_init_inputs()).to(device).eval()
    mine.load_state_dict(model.state_dict())
    compiled = torch.compile(model)
    ways = {"eager": model, "compile": compiled, "ours": mine}
    clocks, flusher, row = Clocks(device), L2Flusher(device), {"task": name, "summary": summary}
    with torch.no_grad():
        (out / f"{name}_inductor.py").write_text(inductor_code(compiled, inputs))
        expected = model(*inputs)
        row["ours_max_abs_diff"] = (mine(*inputs) - expected).abs().max().item()
        for name, fn in ways.items():
            row[f"{name}_ms"] = timed(fn, inputs, runs, clocks, flusher)
            row[f"{name}_kernels"] = per_kernel(fn, inputs, device)
    return row


def table(row: dict) -> str:
    lines = [f"### {row['task']}", "", f"ours: {row['summary']} (max abs diff {row['ours_max_abs_diff']:.2e})", "",
             "| way | whole (ms) | kernels (ms per call) |", "| --- | --- | --- |"]
    for way in ("eager", "compile", "ours"):
        kernels = "; ".join(f"{name} {ms:.3f}" for name, ms in list(row[f"{way}_kernels"].items())[:8])
        lines.append(f"| {way} | {row[f'{way}_ms']:.3f} | {kernels} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    os.environ["KERNELSMITH_DEVICE"] = args.device
    print(f"{name}, torch {torch.__version__}, fp32 (TF32 off), whole calls: the harness's "
          f"clock, L2 flushed, median of {args.runs}; kernels: torch.profiler over 5 calls\n")
    if len(args.tasks) > 1:
        each_in_a_process(__file__, args.tasks, args.out, ["--runs", str(args.runs), "--device", args.device],
                          "breakdown.json")
        return
    for task in args.tasks:
        try:
            rows.append(breakdown(task, args.out, args.runs, args.device))
        except Exception as err:  # one task's failure is a row, not the end of the probe
            rows.append({"task": task.stem, "error": f"{type(err).__name__}: {err}"[:500]})
            print(f"### {task.stem}\n\nfailed: {rows[-1]['error']}\n", flush=True)
            continue
        print(table(rows[-1]), flush=True)
    (args.out / "breakdown.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
