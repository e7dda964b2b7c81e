"""Ops that compute each output element from a region of their input: convolution, pooling, and
concatenation. A float32 convolution's first variant lowers each image to columns (im2col) and multiplies
them by the weight with the BLAS sgemm torch's CPU build carries (gemm.py's), then applies the epilogue in
one threaded pass; the other variants, and every transposed or 16-bit convolution, gather one output element
per step (a direct convolution), the epilogue applied before the store."""

from __future__ import annotations

from math import prod

from kernelsmith.compiler.cpu.common import SCHEDULES, as_float, body_lines, dispatched, loads, store, variants
from kernelsmith.compiler.cpu import pool as pool_rows
from kernelsmith.compiler.cpu.gemm import INT_MAX, SGEMM_DECLARATION
from kernelsmith.compiler.cstyle import window
from kernelsmith.compiler.ir import CatGroup, ConvGroup, PoolGroup


BLAS_VARIANT = "im2col by tiles of output lines, BLAS sgemm per tile, then the epilogue across threads (omp static)"


def conv(group: ConvGroup) -> tuple[str, list[str]]:
    """The kernel's C++ and its variants' names: BLAS first where it fits, then the direct loops."""
    index, value = {v.name: i for i, v in enumerate(group.inputs)}, {v.name: v for v in group.inputs}
    x, w = (as_float(value[name], f"in{index[name]}[{{}}]") for name in (group.x, group.w))
    total = ["    const int64_t k = c;"] + _conv_sum(group, _conv_geometry(group), x, w)
    loops = [_per_output_loop(group, total, "acc", (group.x, group.w), pragma) for _, pragma in SCHEDULES]
    names = [name for name, _ in SCHEDULES]
    if not _blas_fits(group, value):
        return dispatched(group, loops), names
    blas = _blas_body(group, index, fallback=loops[0])
    return SGEMM_DECLARATION + dispatched(group, [blas] + loops), [BLAS_VARIANT] + names


def _blas_fits(group: ConvGroup, value: dict) -> bool:
    operands = [value[group.x], value[group.w]]
    g = _conv_geometry(group)
    largest = max(prod(g["out"]), group.w_shape[1] * prod(g["kernel"]), group.out_shape[1])
    return (not group.transposed and all(v.dtype == "float32" and v.contiguous for v in operands)
            and largest <= INT_MAX)


COLUMN_TILE_BYTES = 1 << 20  # the columns of this many output lines at a time: written, then read, in cache


def _blas_body(group: ConvGroup, index: dict[str, int], fallback: str) -> str:
    """Per image and group, per tile of output lines (O2 positions each, as many as fill COLUMN_TILE_BYTES of
    columns): the tile's columns ([C/groups x taps, tile] row-major), then out[:, tile] = w [K/groups,
    C/groups x taps] x columns by sgemm, column-major as C^T = columns^T w^T. A 1x1 convolution of stride 1
    reads x as its own columns, the whole image at once. Then the epilogue over every element."""
    g, (n, k_out), c_in = _conv_geometry(group), group.out_shape[:2], group.in_shape[1]
    cg, kg, taps, p = c_in // group.groups, k_out // group.groups, prod(g["kernel"]), prod(g["out"])
    direct = taps == 1 and all(v == 1 for v in g["stride"]) and not any(g["padding"])
    lines_total, o2 = g["out"][0] * g["out"][1], g["out"][2]
    tile = lines_total if direct else max(1, min(lines_total, COLUMN_TILE_BYTES // (cg * taps * o2 * 4)))
    in_place = group.outputs[0].dtype == "float32"
    y = "out0" if in_place else "ks_y.data()"
    lines = [f"  if (sgemm_ == nullptr) {{  // this torch has no BLAS sgemm: the first loop variant\n{fallback}\n"
             "    return;\n  }",
             "  const char ks_no = 'N';",
             f"  const int ks_n = {kg}, ks_k = {cg * taps}, ks_ldc = {p};",
             "  const float ks_one = 1.0f, ks_zero = 0.0f;",
             f"  std::vector<float> ks_y({0 if in_place else n * k_out * p});",
             f"  std::vector<float> ks_col({0 if direct else cg * taps * tile * o2});",
             f"  for (int64_t n = 0; n < {n}LL; ++n) {{",
             f"    for (int64_t g = 0; g < {group.groups}LL; ++g) {{",
             f"      const float* ks_x = in{index[group.x]} + (n * {c_in}LL + g * {cg}LL) * {prod(g['in'])}LL;",
             f"      for (int64_t l0 = 0; l0 < {lines_total}LL; l0 += {tile}LL) {{",
             f"        const int64_t l1 = l0 + {tile}LL < {lines_total}LL ? l0 + {tile}LL : {lines_total}LL;",
             f"        const int ks_m = (int)((l1 - l0) * {o2}LL);"]
    if direct:
        lines += ["        const float* ks_a = ks_x;"]
    else:
        lines += [f"        {line}" for line in _im2col(group, g, cg)] + ["        const float* ks_a = ks_col.data();"]
    lines += [f"        sgemm_(&ks_no, &ks_no, &ks_m, &ks_n, &ks_k, &ks_one, ks_a, &ks_m, "
              f"in{index[group.w]} + g * {kg * cg * taps}LL, &ks_k, &ks_zero, {y} + (n * {k_out}LL + g * {kg}LL) * "
              f"{p}LL + l0 * {o2}LL, &ks_ldc);", "      }", "    }", "  }"]
    return "\n".join(lines) + "\n" + _epilogue_pass(group, y.replace(".data()", ""))


def _im2col(group: ConvGroup, g: dict, cg: int) -> list[str]:
    """The columns of output lines [l0, l1), their rows (input channel, tap) across threads: the tap's input
    element per output position, 0 where it falls in the padding. The index is clamped before the load (no
    read outside x), then selected."""
    (i0, i1, i2), (o0, o1, o2), (k0, k1, k2) = g["in"], g["out"], g["kernel"]
    s, pad, dil = g["stride"], g["padding"], g["dilation"]
    return ["#pragma omp parallel for schedule(static)",
            f"for (int64_t r = 0; r < {cg * k0 * k1 * k2}LL; ++r) {{",
            f"  const int64_t cc = r / {k0 * k1 * k2}LL, q0 = r / {k1 * k2}LL % {k0}LL, "
            f"q1 = r / {k2}LL % {k1}LL, q2 = r % {k2}LL;",
            f"  const float* src = ks_x + cc * {i0 * i1 * i2}LL;",
            "  float* dst = ks_col.data() + r * ks_m;",
            "  for (int64_t line = l0; line < l1; ++line) {",
            f"    const int64_t p0 = line / {o1}LL, p1 = line % {o1}LL;",
            f"    const int64_t j0 = p0 * {s[0]} - {pad[0]} + q0 * {dil[0]}, j1 = p1 * {s[1]} - {pad[1]} + q1 * {dil[1]};",
            f"    float* row = dst + (line - l0) * {o2}LL;",
            f"    if (j0 < 0 || j0 >= {i0} || j1 < 0 || j1 >= {i1}) {{",
            f"      for (int64_t p2 = 0; p2 < {o2}LL; ++p2) row[p2] = 0.0f;",
            "      continue;", "    }",
            f"    const float* in_line = src + (j0 * {i1}LL + j1) * {i2}LL;",
            "    #pragma omp simd",
            f"    for (int64_t p2 = 0; p2 < {o2}LL; ++p2) {{",
            f"      const int64_t j2 = p2 * {s[2]} - {pad[2]} + q2 * {dil[2]};",
            f"      const float v = in_line[j2 < 0 ? 0 : (j2 >= {i2} ? {i2 - 1} : j2)];",
            f"      row[p2] = (j2 >= 0 && j2 < {i2}) ? v : 0.0f;",
            "    }", "  }", "}"]


def _epilogue_pass(group: ConvGroup, y: str) -> str:
    """The epilogue over every output element, from the product in `y`, across threads."""
    names = {group.result: "acc"}
    others = [v.name for v in group.inputs if v.name not in (group.x, group.w)]
    body = [f"    const float acc = {y}[flat];"] + loads(group, group.out_shape, "flat", names, only=others)
    body += body_lines(group.epilogue, names)
    body += ["    " + store(o, f"out{j}[flat]", names[o.name]) for j, o in enumerate(group.outputs)]
    return (f"  {SCHEDULES[0][1]}\n  for (int64_t flat = 0; flat < {prod(group.out_shape)}LL; ++flat) {{\n"
            + "\n".join(body) + "\n  }")


def pool(group: PoolGroup) -> tuple[str, list[str]]:
    """The kernel's C++ and its variants' names: by output lines first (cpu/pool.py), then the flat loops."""
    flat = [_pool_flat(group, pragma) for _, pragma in SCHEDULES]
    return dispatched(group, [pool_rows.row_body(group)] + flat), [pool_rows.ROW_VARIANT] + \
        [f"one output per step, {name}" for name, _ in SCHEDULES]


def _pool_flat(group: PoolGroup, pragma: str) -> str:
    """One output element per step: the window's max or mean (of x, or of the prologue computed at each
    element the window reads), then the epilogue."""
    if group.prologue:
        prologue = pool_rows.prologue_lines(group)
        lines = window.pool_lines(group, f"v_{group.x}", lambda offset: [f"const int64_t xi = {offset};"] + prologue)
    else:
        x = [v.name for v in group.inputs].index(group.x)
        lines = window.pool_lines(group, as_float(group.inputs[x], f"in{x}[{{}}]"))
    return _per_output_loop(group, [f"    {line}" for line in lines], f"v_{group.result}",
                            tuple(group.prologue_inputs()), pragma)


def cat(group: CatGroup) -> str:
    """Each output element read from the part that holds it (window.cat_lines)."""
    index = {v.name: i for i, v in enumerate(group.inputs)}

    def read(part: str, offset: str) -> str:
        return as_float(group.inputs[index[part]], f"in{index[part]}[{offset}]")
    body = [f"    {line}" for line in window.cat_lines(group, read)]
    body += ["    " + store(o, f"out{j}[flat]", f"v_{group.result}") for j, o in enumerate(group.outputs)]
    return _flat_loop(group, body)


def _per_output_loop(group, compute: list[str], result: str, operands: tuple[str, ...], pragma: str) -> str:
    """The output elements under `pragma`: `compute` leaves the result in C variable `result` from n, c,
    o0..o2; then the epilogue (its other inputs read at the output's shape) and the stores."""
    names = {group.result: result}
    others = [v.name for v in group.inputs if v.name not in operands]
    body = [f"    {line}" for line in window.decode("flat", group.out_shape)] + compute
    body += loads(group, group.out_shape, "flat", names, only=others) + body_lines(group.epilogue, names)
    body += ["    " + store(o, f"out{j}[flat]", names[o.name]) for j, o in enumerate(group.outputs)]
    return _flat_body(group, body, pragma)


def _flat_loop(group: PoolGroup | ConvGroup | CatGroup, body: list[str]) -> str:
    """`body` once per output element `flat`, under each of the schedules."""
    return variants(group, lambda pragma: _flat_body(group, body, pragma))


def _flat_body(group: PoolGroup | ConvGroup | CatGroup, body: list[str], pragma: str) -> str:
    return (f"  {pragma}\n  for (int64_t flat = 0; flat < {prod(group.out_shape)}LL; ++flat) {{\n"
            + "\n".join(body) + "\n  }")


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
