"""The binding at the end of each `<group>.cpp`: checks its inputs with one-line errors, takes the
strides of strided reads, allocates its outputs and runs the kernel's schedule `config`."""

from __future__ import annotations

from kernelsmith.compiler.cpu.common import broadcasts, ctype, in_ctype
from kernelsmith.compiler.dtypes import ATEN_DTYPES
from kernelsmith.compiler.cstyle.access import Access, access_for
from kernelsmith.compiler.ir import CatGroup, ConvGroup, GemmGroup, Group, PointwiseGroup, PoolGroup, Value


def binding(group: Group) -> str:
    name = group.name
    args = ", ".join(f"{'double' if v.scalar else 'at::Tensor'} in{i}" for i, v in enumerate(group.inputs))
    tensors = [i for i, v in enumerate(group.inputs) if not v.scalar]
    if not tensors:
        raise ValueError(f"{name}: a kernel with no tensor input is unsupported")
    space, in_place = _space(group), group.operand_strides() if isinstance(group, GemmGroup) else {}
    lines = []
    for i, value in enumerate(group.inputs):
        lines += _scalar_lines(i) if value.scalar else _input_checks(name, i, value, space(value),
                                                                     in_place.get(value.name))
    for j, out in enumerate(group.outputs):
        dtype = ATEN_DTYPES[out.dtype]
        shape = ", ".join(str(s) for s in out.shape)
        lines.append(f"  auto out{j} = at::empty({{{shape}}}, in{tensors[0]}.options().dtype({dtype}));")
    call = ", ".join([f"&scalar{i}, st{i}" if v.scalar else f"in{i}.data_ptr<{in_ctype(v)}>(), st{i}"
                      for i, v in enumerate(group.inputs)] +
                     [f"out{j}.data_ptr<{ctype(o)}>()" for j, o in enumerate(group.outputs)])
    lines.append(f"  {name}_run((int)config, {call});")
    outs = ", ".join(f"out{j}" for j in range(len(group.outputs)))
    ret_type = "at::Tensor" if len(group.outputs) == 1 else "std::vector<at::Tensor>"
    lines.append(f"  return {outs};" if len(group.outputs) == 1 else f"  return {{{outs}}};")
    return (f"{ret_type} {name}({args}, int64_t config) {{\n" + "\n".join(lines) + "\n}\n\n"
            f"REGISTER_KERNEL({name}, {name});\n")


def _space(group: Group):
    """The index space an input is read in (for its stride checks)."""
    if isinstance(group, PointwiseGroup):
        return lambda v: group.shape
    if isinstance(group, GemmGroup):
        return lambda v: None if v.name in (group.a, group.b, group.bias) else group.out_shape
    if isinstance(group, ConvGroup):
        return lambda v: None if v.name in (group.x, group.w) else group.out_shape
    if isinstance(group, PoolGroup):  # a prologue's inputs are read at in_shape
        return lambda v: None if v.name == group.x else \
            group.in_shape if v.name in group.prologue_inputs() else group.out_shape
    if isinstance(group, CatGroup) or group.kind == "recurrent":
        return lambda v: None  # every part (every input of a recurrent layer) is read dense
    return lambda v: group.in_shape if broadcasts(v, group.in_shape) else group.result_shape


def _scalar_lines(i: int) -> list[str]:
    """A float argument, read by the kernel like a one-element input."""
    return [f"  const float scalar{i} = (float)in{i};", f"  KsStrides st{i} = {{}};"]


def _input_checks(name: str, i: int, value: Value, space, strides: tuple[int, ...] | None = None) -> list[str]:
    """`strides`: those of a GEMM operand read in place, baked into the kernel (checked equal)."""
    shape = ", ".join(str(s) for s in value.shape)
    lines = [f'  TORCH_CHECK(in{i}.device().is_cpu(), "{name}: input {i} ({value.name}) must be a CPU tensor");',
             f'  TORCH_CHECK(in{i}.scalar_type() == {ATEN_DTYPES[value.dtype]}, '
             f'"{name}: input {i} ({value.name}) must be {value.dtype}");',
             f'  TORCH_CHECK(in{i}.sizes() == c10::IntArrayRef({{{shape}}}), "{name}: input {i} ({value.name}) '
             f'must have shape [{shape}], got ", in{i}.sizes());',
             f"  KsStrides st{i} = {{}};"]
    if strides is not None:
        return lines + [_stride_check(name, i, value, strides)]
    access = access_for(value.shape, value.contiguous, space) if space is not None else Access("dense", ())
    if access.mode == "strided":
        dims = ", ".join(str(s) for s in space)
        lines += [f"  {{ auto e = in{i}.expand({{{dims}}}); for (int64_t d = 0; d < e.dim(); ++d) "
                  f"st{i}.s[d] = e.stride(d); }}"]
        if value.contiguous:  # a pointwise run reads it as contiguous memory along its trailing dims
            lines.append(f'  TORCH_CHECK(in{i}.is_contiguous(), "{name}: input {i} ({value.name}) must be contiguous");')
    elif access.mode == "dense":
        lines.append(f'  TORCH_CHECK(in{i}.is_contiguous(), "{name}: input {i} ({value.name}) must be contiguous");')
    return lines


def _stride_check(name: str, i: int, value: Value, strides: tuple[int, ...]) -> str:
    want = ", ".join(str(s) for s in strides)
    return (f'  TORCH_CHECK(in{i}.strides() == c10::IntArrayRef({{{want}}}), "{name}: input {i} ({value.name}) '
            f'must have strides [{want}], got ", in{i}.strides());')
