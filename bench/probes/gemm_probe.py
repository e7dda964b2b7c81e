"""Why are the built-in policy's cuBLAS matmuls 3-5% slower than eager? (device probe)

    python3 bench/probes/gemm_probe.py [TASK.py] [--runs 200]

Builds the policy's kernels for a plain-matmul task (default: level1/1_Square_matrix_multiplication_),
then times, in one process and interleaved, with the harness's own clock and L2 flush:
torch.mm (eager), the generated binding (every launch variant), the binding under the Python
dispatch-mode recorder inside the timed interval (how harness version 1 timed candidates), and
the binding with the native op watch armed outside it (version 2). Prints the median of each,
and which libcublas files the process mapped (torch's copy, or a second one from the toolkit).

2026-11-30, H200: binding 2.7430 ms against torch.mm 2.7481 ms (1.002x), while the bench had
the same task at 0.95x eager: the gap is in the harness's path, not in cuBLAS.
"""
from contextlib import nullcontext
import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore")
from kernelsmith.compiler.pipeline import build_plan  # noqa: E402
from kernelsmith.harness import build, guards, op_watch  # noqa: E402
from kernelsmith.harness.timing import Clocks, L2Flusher  # noqa: E402

DEFAULT = ".shared/kernelbench/level1/1_Square_matrix_multiplication_.py"


def built_extension(task: str):
    plan = build_plan(task, "cuda", "fp32")
    if plan.unsupported:
        sys.exit(f"unsupported: {plan.unsupported}")
    (group,) = plan.plan.groups()
    root = Path(tempfile.mkdtemp())
    (root / "kernels").mkdir()
    for name, text in plan.files.items():
        (root / "kernels" / name).write_text(text)
    result = build.build(root / "kernels", "cuda", build_dir=root / "build")
    if not result.ok:
        sys.exit(result.summary)
    return build.import_extension(result.so_path, result.name), group, len(plan.variants[0])


def cublas_maps() -> list[str]:
    lines = Path("/proc/self/maps").read_text().splitlines()
    return sorted({line.split()[-1] for line in lines if "libcublas" in line})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("task", nargs="?", default=DEFAULT)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    ext, group, variants = built_extension(args.task)
    a, b = (torch.randn(group.m, group.k, device="cuda"), torch.randn(group.k, group.n, device="cuda"))
    calls = {"eager torch.mm": lambda: torch.mm(a, b)}
    for config in range(variants):
        calls[f"binding, variant {config}"] = (lambda c: lambda: getattr(ext, group.name)(a, b, c))(config)
    recorder = guards.OpRecorder()
    native, why = op_watch.open_watch()
    print("native op watch:", "built" if native else why)

    def under_recorder():
        with torch.no_grad(), recorder:
            return getattr(ext, group.name)(a, b, 0)

    calls["binding, python mode (v1)"] = under_recorder

    def empty_under_recorder():  # the recorder's own cost in a timed interval, without a kernel
        with torch.no_grad(), recorder:
            return torch.empty(group.m, group.n, device="cuda")

    calls["torch.empty alone"] = lambda: torch.empty(group.m, group.n, device="cuda")
    calls["torch.empty, python mode"] = empty_under_recorder
    outside = {}
    if native:
        calls["binding, native watch (v2)"] = calls["binding, variant 0"]
        outside["binding, native watch (v2)"] = native
    clocks, flusher = Clocks("cuda"), L2Flusher("cuda")
    samples = {name: [] for name in calls}
    for _ in range(5):  # warm-up: handles, cuBLAS heuristics, the caching allocator
        for fn in calls.values():
            fn()
    for _ in range(args.runs):
        for name, fn in calls.items():  # interleaved, so clock drift hits every call alike
            flusher.flush()
            with outside.get(name) or nullcontext():
                samples[name].append(clocks.time_call(fn, ())[0])
    eager = statistics.median(samples["eager torch.mm"])
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.runs} runs each, L2 flushed")
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"{name:24s} median {med:.4f} ms  min {min(values):.4f}  eager/this {eager / med:.3f}x")
    print("libcublas mapped:", *cublas_maps(), sep="\n  ")
    ref = torch.mm(a, b)
    got = getattr(ext, group.name)(a, b, 0)
    print("max abs diff vs torch.mm:", (ref - got).abs().max().item())


if __name__ == "__main__":
    main()
