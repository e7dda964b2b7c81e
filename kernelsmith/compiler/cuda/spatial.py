"""Kernels that compute each output element from a region of their input: pooling over spatial
windows and concatenation. A grid-stride kernel runs once per output element; the window and
the concatenation's element are C both targets share (cstyle/window.py)."""

from __future__ import annotations

from math import prod

from kernelsmith.compiler.cstyle import ops, window
from kernelsmith.compiler.cuda.binding import generated
from kernelsmith.compiler.cuda.common import (Param, Read, as_float, call, cu_file, dense, indent, input_params, launcher,
                                              output_params, read, require_outputs, signature, store, stride_params,
                                              table)
from kernelsmith.compiler.ir import CatGroup, Generated, PoolGroup, Value

THREADS = (256, 128, 512)


def pool(group: PoolGroup, values: dict[str, Value]) -> Generated:
    """One output element per thread step: the window's max or mean (of x, or of the prologue computed at
    each element the window reads), then the epilogue, then the stores."""
    if not group.prologue and not values[group.x].contiguous:
        raise ValueError(f"{group.name}: pooling a non-contiguous input is unsupported")
    at_in = group.prologue_inputs()
    reads = [read(values[v.name], group.out_shape) for v in group.inputs if v.name not in at_in]
    per_channel, per_element = _prologue_reads(group, values) if group.prologue else ([], [])
    params = input_params(group) + stride_params(per_channel + per_element + reads) + output_params(group)
    names = {r.value.name: r.var for r in reads}
    names[group.result] = f"v_{group.result}"
    epilogue = ops.body_lines(group.epilogue, names, "")
    require_outputs(group, names, prod(group.out_shape))
    lines = window.decode("flat", group.out_shape)
    if group.prologue:
        lines += [f"const float {r.var} = {r.load(_channel_flat(group))};" for r in per_channel]
        lines += window.pool_lines(group, f"v_{group.x}", _element(group, per_channel, per_element))
    else:
        lines += window.pool_lines(group, as_float(values[group.x], f"__ldg(&p_{group.x}[{{}}])"))
    lines += [f"const float {r.var} = {r.load('flat')};" for r in reads] + epilogue
    lines += [store(o, f"p_{o.name}[flat]", names[o.name]) for o in group.outputs]
    what = (f"{group.mode} pooling of {list(group.in_shape)} -> {list(group.out_shape)}, window {list(group.kernel)}, "
            f"stride {list(group.stride)}, padding {list(group.padding)}"
            + (", its prologue at each element read" if group.prologue else "") + ", its epilogue")
    dense_inputs = dense(per_element + reads) | (set() if group.prologue else {group.x})
    return _per_output(group, what, params, lines, dense_inputs)


def _prologue_reads(group: PoolGroup, values: dict[str, Value]) -> tuple[list[Read], list[Read]]:
    """The prologue's inputs: those constant over a window (one value per image and channel, a bias)
    loaded once per output element, and the rest at each element the window reads (index `xi`)."""
    channel_space = tuple(group.in_shape[:2]) + (1,) * (len(group.in_shape) - 2)
    per_channel, per_element, at_in = [], [], group.prologue_inputs()
    for v in group.inputs:
        if v.name not in at_in:
            continue
        shape = (1,) * (len(group.in_shape) - len(v.shape)) + tuple(v.shape)
        if not v.scalar and all(s == 1 for s in shape[2:]) and prod(group.in_shape[2:]) > 1:
            per_channel.append(read(values[v.name], channel_space, "xc_", "sc_"))
        else:
            per_element.append(read(values[v.name], group.in_shape, "xi_", "si_"))
    return per_channel, per_element


def _element(group: PoolGroup, per_channel: list[Read], per_element: list[Read]):
    """The lines computing the prologue at input offset `offset` (x ends in v_<x>)."""
    def lines(offset: str) -> list[str]:
        names = {r.value.name: r.var for r in per_channel + per_element}
        loads = [f"const float {r.var} = {r.load('xi')};" for r in per_element]
        return [f"const int64_t xi = {offset};"] + loads + ops.body_lines(group.prologue, names, "")
    return lines


def _channel_flat(group: PoolGroup) -> str:
    return f"(n * {group.in_shape[1]}LL + c)"


def cat(group: CatGroup) -> Generated:
    """Each output element read from the part that holds it (window.cat_lines); parts dense."""
    params, parts = input_params(group) + output_params(group), {v.name: v for v in group.inputs}
    lines = window.cat_lines(group, lambda part, offset: as_float(parts[part], f"__ldg(&p_{part}[{offset}])"))
    lines += [store(o, f"p_{o.name}[flat]", f"v_{group.result}") for o in group.outputs]
    what = f"cat of {len(group.parts)} parts along dim {group.dim} -> {list(group.out_shape)}"
    return _per_output(group, what, params, lines, set(group.parts))


def _per_output(group: PoolGroup | CatGroup, what: str, params: list[Param], lines: list[str],
                dense_inputs: set[str]) -> Generated:
    """A grid-stride kernel running `lines` once per output element `flat`, in THREADS variants."""
    numel = prod(group.out_shape)
    kernel = (f"__global__ void __launch_bounds__(512) {group.name}_kernel({signature(params, True)}) {{\n"
              "  const int64_t step = (int64_t)gridDim.x * blockDim.x;\n"
              f"  for (int64_t flat = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; flat < {numel}LL; "
              "flat += step) {\n" + "\n".join(indent(lines, 4)) + "\n  }\n}\n")
    launch = [table("int", "kThreads", THREADS), "  const int threads = kThreads[config];",
              f"  {group.name}_kernel<<<ks_blocks({numel}LL, threads), threads, 0, stream>>>({call(params)});"]
    source = cu_file(group, what, [kernel], launcher(group.name, params, len(THREADS), launch))
    return generated(group, {f"{group.name}.cu": source}, params, dense_inputs,
                     [f"one output per thread step, {t} threads/block" for t in THREADS])
