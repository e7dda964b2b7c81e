"""Pointwise groups: one loop over the index space, inputs read dense or through strides."""

from __future__ import annotations

from math import prod

from kernelsmith.compiler.cpu.common import loads, variants
from kernelsmith.compiler.cstyle import ops
from kernelsmith.compiler.ir import PointwiseGroup


def pointwise(group: PointwiseGroup) -> str:
    names: dict[str, str] = {}
    lines = loads(group, group.shape, "i", names) + ops.body_lines(group.body, names)
    lines += [f"    out{j}[i] = {names[o.name]};" for j, o in enumerate(group.outputs)]
    numel = prod(group.shape)

    def loop(pragma):
        return f"  {pragma}\n  for (int64_t i = 0; i < {numel}LL; ++i) {{\n" + "\n".join(lines) + "\n  }"
    return variants(group, loop)
