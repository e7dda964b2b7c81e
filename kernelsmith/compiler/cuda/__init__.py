"""The CUDA target: one kernel (and one binding) per group, a module per kernel family.

Each group becomes `<name>.cu` (CUDA headers only), `<name>_binding.cpp` (a light binding of
ATen's Tensor: input checks, output allocation, the current stream, REGISTER_KERNEL) and, for a
GEMM, `<name>_gemm.cu` with the cuBLAS call, or for a convolution, `<name>_conv.cu` with the
cuDNN call. The launcher `<name>_launch(..., int config, cudaStream_t stream)` picks a launch
variant at run time: `Generated.variants[config]` describes it. Sizes are baked in as
constants, since a task's shapes are static; the binding checks them. Fixed C text is in text/.

C names: `p_<value>` pointers, `s_<value>` / `t_<value>` strides of a strided read at the
kernel's index space / at a reduction's reduced shape, `x_<value>` / `xr_<value>` loaded
elements, `v_<value>` op results (ops.body_lines). Helpers start with `ks_`.
"""

from __future__ import annotations

from kernelsmith.compiler.cuda.common import ARG_REDUCTIONS, used
from kernelsmith.compiler.cuda.conv import conv
from kernelsmith.compiler.cuda.elementwise import pointwise
from kernelsmith.compiler.cuda.gemm import gemm
from kernelsmith.compiler.cuda.recurrent import recurrent
from kernelsmith.compiler.cuda.reduce import reduction
from kernelsmith.compiler.cuda.scan import scan
from kernelsmith.compiler.cuda.spatial import cat, pool
from kernelsmith.compiler.dtypes import FLOATS
from kernelsmith.compiler.ir import (SCANS, CatGroup, ConvGroup, GemmGroup, Generated, Group, PointwiseGroup,
                                     PoolGroup, ReductionGroup, Value)
from kernelsmith.compiler.recurrent import RecurrentGroup


def generate(group: Group, values: dict[str, Value], precision: str = "fp32") -> Generated:
    """The CUDA sources of one group; ValueError when something is out of scope. `precision` sets the
    math of cuBLAS and cuDNN; every other kernel loads each value at its dtype and computes in float."""
    if not group.inputs:
        raise ValueError(f"{group.name}: a group without inputs is unsupported")
    if isinstance(group, RecurrentGroup):
        return recurrent(group)  # (float32 only: it checks its own dtypes)
    _check_dtypes(group, values)
    if isinstance(group, PointwiseGroup):
        return pointwise(group)
    if isinstance(group, ReductionGroup):
        return scan(group) if group.reduce in SCANS else reduction(group)
    if isinstance(group, GemmGroup):
        return gemm(group, values, precision)
    if isinstance(group, ConvGroup):
        return conv(group, values, precision)
    if isinstance(group, PoolGroup):
        return pool(group, values)
    if isinstance(group, CatGroup):
        return cat(group)
    raise ValueError(f"{group.name}: {group.kind} groups are unsupported by the CUDA generator")


def _check_dtypes(group: Group, values: dict[str, Value]) -> None:
    """Floats (float32, bfloat16, float16) everywhere, except the int64 result of argmax/argmin, bool inputs of
    pointwise ops and bools computed (as 0.0/1.0) and used inside the kernel."""
    index_result = group.result if isinstance(group, ReductionGroup) and group.reduce in ARG_REDUCTIONS else None
    results = [getattr(group, "result", None), getattr(group, "variance", None)]
    computed = [values[op.out] for op in group.ops()] + [values[r] for r in results if r]
    bool_inputs = {v.name for v in group.inputs if v.dtype == "bool"} & used(group.ops())
    stored = {v.name for v in group.outputs}
    for value in [*group.inputs, *group.outputs, *computed]:
        wanted = ("int64",) if value.name == index_result else FLOATS
        if value.name in bool_inputs or (value.dtype == "bool" and value in computed and value.name not in stored):
            continue  # a bool read or computed as 0.0/1.0 inside the kernel
        if value.dtype not in wanted:
            raise ValueError(f"{group.name}: {value.name} is {value.dtype}, unsupported (wanted {' or '.join(wanted)})")
