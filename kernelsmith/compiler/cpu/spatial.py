"""Ops that compute each output element from a region of their input: direct convolution (a
gather, also for the transposed case), pooling, and concatenation; one output element per step,
the epilogue applied before the store."""

from __future__ import annotations

from math import prod

from kernelsmith.compiler.cpu.common import as_float, body_lines, loads, store, variants
from kernelsmith.compiler.cstyle import window
from kernelsmith.compiler.ir import CatGroup, ConvGroup, PoolGroup


def conv(group: ConvGroup) -> str:
    """Direct convolution, one output element per step (a gather, also for the transposed
    case), with the epilogue applied before the store."""
    index, value = {v.name: i for i, v in enumerate(group.inputs)}, {v.name: v for v in group.inputs}
    x, w = (as_float(value[name], f"in{index[name]}[{{}}]") for name in (group.x, group.w))
    total = ["    const int64_t k = c;"] + _conv_sum(group, _conv_geometry(group), x, w)
    return _per_output(group, total, "acc", (group.x, group.w))


def pool(group: PoolGroup) -> str:
    """One output element per step: the window's max or mean, then the epilogue."""
    x = [v.name for v in group.inputs].index(group.x)
    pooled = [f"    {line}" for line in window.pool_lines(group, as_float(group.inputs[x], f"in{x}[{{}}]"))]
    return _per_output(group, pooled, f"v_{group.result}", (group.x,))


def cat(group: CatGroup) -> str:
    """Each output element read from the part that holds it (window.cat_lines)."""
    index = {v.name: i for i, v in enumerate(group.inputs)}

    def read(part: str, offset: str) -> str:
        return as_float(group.inputs[index[part]], f"in{index[part]}[{offset}]")
    body = [f"    {line}" for line in window.cat_lines(group, read)]
    body += ["    " + store(o, f"out{j}[flat]", f"v_{group.result}") for j, o in enumerate(group.outputs)]
    return _flat_loop(group, body)


def _per_output(group, compute: list[str], result: str, operands: tuple[str, ...]) -> str:
    """A loop over the output elements of a window op ([N, C, *spatial]): `compute` leaves the
    result in C variable `result` from n, c, o0..o2; then the epilogue (its other inputs read
    at the output's shape) and the stores."""
    names = {group.result: result}
    others = [v.name for v in group.inputs if v.name not in operands]
    body = [f"    {line}" for line in window.decode("flat", group.out_shape)] + compute
    body += loads(group, group.out_shape, "flat", names, only=others) + body_lines(group.epilogue, names)
    body += ["    " + store(o, f"out{j}[flat]", names[o.name]) for j, o in enumerate(group.outputs)]
    return _flat_loop(group, body)


def _flat_loop(group: PoolGroup | ConvGroup | CatGroup, body: list[str]) -> str:
    """`body` once per output element `flat`, under each of the schedules."""
    def loop(pragma):
        return (f"  {pragma}\n  for (int64_t flat = 0; flat < {prod(group.out_shape)}LL; ++flat) {{\n"
                + "\n".join(body) + "\n  }")
    return variants(group, loop)


def _conv_geometry(group: ConvGroup) -> dict[str, tuple[int, ...]]:
    """Sizes per spatial dim, padded in front to three dims (a missing dim has size 1)."""
    three = window.three
    return {"in": three(group.in_shape[2:], 1), "out": three(group.out_shape[2:], 1),
            "kernel": three(group.w_shape[2:], 1), "stride": three(group.stride, 1),
            "padding": three(group.padding, 0), "dilation": three(group.dilation, 1)}


def _conv_sum(group: ConvGroup, g: dict, x: str, w: str) -> list[str]:
    """acc = the sum over the input channels ci of the output channel k's group and the kernel window;
    `x` and `w` format an offset into a float load of each."""
    i, kern, (c_in, c_w) = g["in"], g["kernel"], (group.in_shape[1], group.w_shape[1])
    k_out = group.out_shape[1]
    per_group_in = c_in // group.groups
    if group.transposed:  # w is [c_in, k_out / groups, ...]: input channel c reaches k
        channel = f"const int64_t ci = (k / {c_w}) * {per_group_in} + cc;"
        w_at = w.format(f"((ci * {c_w} + k % {c_w}) * {kern[0]} + q0) * {kern[1] * kern[2]} + q1 * {kern[2]} + q2")
    else:  # w is [k_out, c_in / groups, ...]
        channel = f"const int64_t ci = (k / {k_out // group.groups}) * {c_w} + cc;"
        w_at = w.format(f"((k * {c_w} + cc) * {kern[0]} + q0) * {kern[1] * kern[2]} + q1 * {kern[2]} + q2")
    lines = ["    float acc = 0.0f;", f"    for (int64_t cc = 0; cc < {per_group_in}; ++cc) {{", f"      {channel}"]
    depth = 6
    for d in range(3):
        lines.append(" " * depth + f"for (int64_t q{d} = 0; q{d} < {kern[d]}; ++q{d}) {{")
        lines += [" " * (depth + 2) + line for line in _conv_tap(group, g, d)]
        depth += 2
    x_at = x.format(f"((n * {c_in} + ci) * {i[0]} + i0) * {i[1] * i[2]} + i1 * {i[2]} + i2")
    lines.append(" " * depth + f"acc += {x_at} * {w_at};")
    lines += [" " * d + "}" for d in range(depth - 2, 2, -2)]
    return lines


def _conv_tap(group: ConvGroup, g: dict, d: int) -> list[str]:
    """The input position along spatial dim d for kernel tap q<d>, skipping taps outside."""
    s, p, dil, size = g["stride"][d], g["padding"][d], g["dilation"][d], g["in"][d]
    if group.transposed:  # out = in * s - p + q * dil  =>  in = (out + p - q * dil) / s when it divides
        return [f"const int64_t t{d} = o{d} + {p} - q{d} * {dil};",
                f"if (t{d} < 0 || t{d} % {s} != 0 || t{d} / {s} >= {size}) continue;",
                f"const int64_t i{d} = t{d} / {s};"]
    return [f"const int64_t i{d} = o{d} * {s} - {p} + q{d} * {dil};",
            f"if (i{d} < 0 || i{d} >= {size}) continue;"]
