"""The CPU target: C++ with OpenMP, one `<group>.cpp` per group, kernel and binding together
(the CPU build has no nvcc split). Launch variants differ in how the outer loop is shared among
threads; `config` picks one at run time. Fixed C++ text is in text/.
"""

from __future__ import annotations

from kernelsmith.compiler.cpu.binding import binding
from kernelsmith.compiler.cpu.common import SCHEDULES, header
from kernelsmith.compiler.cpu.elementwise import pointwise
from kernelsmith.compiler.cpu.gemm import gemm
from kernelsmith.compiler.cpu.recurrent import recurrent
from kernelsmith.compiler.cpu.reduce import reduction, scan
from kernelsmith.compiler.cpu.spatial import cat, conv, pool
from kernelsmith.compiler.ir import (SCANS, CatGroup, ConvGroup, GemmGroup, Generated, Group, PointwiseGroup,
                                     PoolGroup, ReductionGroup, Value)
from kernelsmith.compiler.recurrent import RecurrentGroup


def generate(group: Group, values: dict[str, Value], precision: str = "fp32") -> Generated:
    """The C++ source of one group (`values`, `precision`: the same signature as the CUDA target's). Every
    precision computes in float; bf16 and fp16 values are stored at their dtype (common.HALF_TYPES)."""
    kernel, variants = _kernel(group)
    source = "\n".join([header(), kernel, binding(group)])
    return Generated({f"{group.name}.cpp": source}, group.name, variants)


def _kernel(group: Group) -> tuple[str, list[str]]:
    """The kernel's C++ and the names of its launch variants (what `config` selects)."""
    if isinstance(group, PointwiseGroup):
        return pointwise(group)
    if isinstance(group, RecurrentGroup):
        return recurrent(group)
    if isinstance(group, GemmGroup):
        return gemm(group)
    if isinstance(group, ConvGroup):
        return conv(group)
    if isinstance(group, PoolGroup):
        return pool(group)
    return _looped(group), [name for name, _ in SCHEDULES]


def _looped(group: Group) -> str:
    if isinstance(group, ReductionGroup):
        return scan(group) if group.reduce in SCANS else reduction(group)
    if isinstance(group, CatGroup):
        return cat(group)
    raise ValueError(f"no CPU generator for {group.kind}")
