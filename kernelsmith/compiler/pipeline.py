"""From a task file to the files of its kernels: capture, rewrite and partition the graph, then a
kernel per group for the device."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.compiler import emit
from kernelsmith.compiler.capture import capture
from kernelsmith.compiler.graph import CaptureError
from kernelsmith.compiler.ir import Plan
from kernelsmith.compiler.lowering import Unsupported
from kernelsmith.compiler.partition import plan as partition

# fp32 and tf32 store float32; bf16 and fp16 store every float value at that dtype. All compute in float;
# tf32, bf16 and fp16 run GEMMs and convolutions on tensor cores (docs/builtin.md, "Precisions").
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


@dataclass
class Built:
    plan: Plan | None = None
    files: dict[str, str] = field(default_factory=dict)
    variants: list[list[str]] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        return emit.describe(self.plan) if self.plan else ""

    def model_new(self, configs: list[int]) -> str:
        return emit.model_new_source(self.plan, configs, self.variants)


def generator(device: str):
    """The target's code generator, imported only when that target is asked for."""
    if device == "cuda":
        from kernelsmith.compiler import cuda

        return cuda.generate
    from kernelsmith.compiler import cpu

    return cpu.generate


def build_plan(model_path: Path, device: str, precision: str) -> Built:
    if precision not in PRECISIONS:
        return Built(unsupported=[f"precision {precision} (the built-in policy generates {', '.join(PRECISIONS)})"])
    try:
        graph = capture(model_path, precision)
    except CaptureError as err:
        return Built(unsupported=[str(err)])
    plan = partition(graph)
    if plan.unsupported:
        return Built(plan, unsupported=plan.unsupported)
    built, generate, values = Built(plan), generator(device), plan.values
    for group in plan.groups():
        try:
            made = generate(group, values, precision)
        except (Unsupported, ValueError) as err:  # (the generators' messages name the group already)
            reason = str(err) if str(err).startswith(f"{group.name}: ") else f"{group.name}: {err}"
            return Built(plan, unsupported=[reason])
        built.files.update(made.files)
        built.variants.append(made.variants)
    return built
