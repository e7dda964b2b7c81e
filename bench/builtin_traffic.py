"""The built-in policy's planned memory traffic per task, with and without recomputation (remat.py).

    python bench/builtin_traffic.py .shared/kernelbench/level2/21_Conv2d_Add_Scale_Sigmoid_GroupNorm.py ...
    python bench/builtin_traffic.py --without view_hoist TASKS...   # the traffic with and without a graph pass

An estimate from the plan alone (nothing runs): each kernel reads its tensor inputs once, or
twice when it makes a second pass over its operand (a broadcast epilogue, softmax), and writes
its outputs once; fp32. Library kernels (cuBLAS, cuDNN) are counted at their inputs and outputs, and their
pointwise epilogue, a pass of its own over the library's result, at one read and one write of it; a GEMM
operand read in place through a layout (an expanded weight) at the matrices it holds.
Prints a markdown table.
"""
import argparse
import os
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
from kernelsmith.compiler.pipeline import build_plan  # noqa: E402
from kernelsmith.compiler import passes  # noqa: E402
from kernelsmith.compiler.ir import ConvGroup, GemmGroup, ReductionGroup  # noqa: E402


def gib_moved(plan) -> float:
    total = 0
    for group in plan.groups():
        reads = group.elements_read()  # (a GEMM operand read through a layout: its matrices, a shared one once)
        two_pass = isinstance(group, ReductionGroup) and (group.broadcast_epilogue or
                                                          group.reduce in ("softmax", "log_softmax"))
        total += reads * (2 if two_pass else 1) + sum(o.numel for o in group.outputs) + library_epilogue(group)
    return total * 4 / 2**30


def library_epilogue(group) -> int:
    """Elements an epilogue pass after cuBLAS or cuDNN moves: it reads the library's result and writes it back."""
    if not isinstance(group, (GemmGroup, ConvGroup)):
        return 0
    kept = [o.name for o in group.outputs] == [group.result]
    result = next((o.numel for o in group.outputs if o.name == group.result), group.outputs[0].numel)
    return 0 if kept and not group.epilogue and not getattr(group, "bias", None) else 2 * result


def without(names: list[str]) -> None:
    """Turn the named graph passes (modules of compiler/passes/) into the identity."""
    for name in names:
        module = getattr(passes, name)
        entry = next(f for f in ("hoist", "sink", "fold", "split", "expand") if hasattr(module, f))
        setattr(module, entry, lambda graph: graph)


def planned(task: Path, remat: bool = True):
    os.environ["KERNELSMITH_REMAT"] = "1" if remat else "0"
    built = build_plan(task, "cuda", "fp32")
    return (len(built.plan.groups()), gib_moved(built.plan)) if built.plan and not built.unsupported else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tasks", nargs="+", type=Path)
    parser.add_argument("--without", action="append", default=[], help="a graph pass to compare against: view_hoist")
    args = parser.parse_args()
    if args.without:
        return compare_without(args.tasks, args.without)
    print("| task | kernels | GiB moved, stored | GiB moved, recomputed | ratio |\n|---|---|---|---|---|")
    for task in args.tasks:
        before, after = planned(task, False), planned(task, True)
        if before is None or after is None:
            print(f"| {task.stem} | unsupported | | | |")
            continue
        print(f"| {task.parent.name}/{task.stem} | {after[0]} | {before[1]:.2f} | {after[1]:.2f} | "
              f"{after[1] / before[1]:.2f} |")


def compare_without(tasks: list[Path], names: list[str]) -> None:
    print(f"| task | kernels | GiB moved | GiB moved without {', '.join(names)} | ratio |\n|---|---|---|---|---|")
    rows = [(task, planned(task)) for task in tasks]
    without(names)
    for task, after in rows:
        before = planned(task)
        if before is None or after is None:
            print(f"| {task.stem} | unsupported | | | |")
            continue
        print(f"| {task.parent.name}/{task.stem} | {after[0]} | {after[1]:.2f} | {before[1]:.2f} | "
              f"{after[1] / before[1]:.2f} |")


if __name__ == "__main__":
    main()
