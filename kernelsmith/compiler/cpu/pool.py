"""Pooling on the CPU by output lines: the first variant takes a line of outputs along the last spatial dim
at a time (a tile of it, in a local array) and walks the window tap by tap, each tap a `#pragma omp simd` loop
over the tile's outputs whose input lies inside the line (the padding is left out of the loop's range, not
tested per element). The flat loops (one output per step, its index decoded by division, every tap
bounds-tested: cstyle/window.py) stay as the other variants."""

from __future__ import annotations

from math import prod

from kernelsmith.compiler.cpu.common import SCHEDULES, as_float, body_lines, loads, store
from kernelsmith.compiler.cstyle.window import three
from kernelsmith.compiler.ir import PoolGroup

TILE = 256  # outputs of one line in the local accumulator array at a time
ROW_VARIANT = "output lines, each window tap a simd loop over a tile of 256 outputs (omp static)"


def row_body(group: PoolGroup) -> str:
    """The first variant's body: the lines (n, c, o0, o1) across threads, each in tiles of its outputs."""
    g = _geometry(group)
    lines = [f"  {SCHEDULES[0][1]}", f"  for (int64_t row = 0; row < {prod(g['out'][:2]) * prod(group.out_shape[:2])}LL; ++row) {{",
             f"    const int64_t o1 = row % {g['out'][1]}LL, o0 = row / {g['out'][1]}LL % {g['out'][0]}LL;",
             f"    const int64_t c = row / {g['out'][0] * g['out'][1]}LL % {group.out_shape[1]}LL, "
             f"n = row / {g['out'][0] * g['out'][1] * group.out_shape[1]}LL;",
             f"    float acc[{min(TILE, g['out'][2])}];",
             f"    for (int64_t t0 = 0; t0 < {g['out'][2]}LL; t0 += {TILE}LL) {{",
             f"      const int64_t len = {g['out'][2]}LL - t0 < {TILE}LL ? {g['out'][2]}LL - t0 : {TILE}LL;",
             f"      for (int64_t j = 0; j < len; ++j) acc[j] = {'-INFINITY' if group.mode == 'max' else '0.0f'};"]
    lines += _taps(group, g) + _finish(group, g) + ["    }", "  }"]
    return "\n".join(lines)


def _geometry(group: PoolGroup) -> dict[str, tuple[int, ...]]:
    return {"size": three(group.in_shape[2:], 1), "out": three(group.out_shape[2:], 1),
            "kernel": three(group.kernel, 1), "stride": three(group.stride, 1),
            "padding": three(group.padding, 0), "dilation": three(group.dilation, 1)}


def _taps(group: PoolGroup, g: dict) -> list[str]:
    """Each tap (q0, q1, q2) of the window: its input line's base, and the outputs o2 of the tile whose input
    i2 = o2 * stride + shift lies in [0, size): o2 from ceil(-shift / stride) to ceil((size - shift) / stride)."""
    size, stride, pad, dil, k = g["size"], g["stride"], g["padding"], g["dilation"], g["kernel"]
    lines = []
    for d in (0, 1):
        ind = "      " + "  " * d
        lines += [f"{ind}for (int64_t q{d} = 0; q{d} < {k[d]}; ++q{d}) {{",
                  f"{ind}  const int64_t i{d} = o{d} * {stride[d]} - {pad[d]} + q{d} * {dil[d]};",
                  f"{ind}  if (i{d} < 0 || i{d} >= {size[d]}) continue;"]
    s2 = stride[2]
    lines += [f"          const int64_t base = ((n * {group.in_shape[1]} + c) * {size[0]} + i0) * {size[1] * size[2]}"
              f" + i1 * {size[2]};",
              f"          for (int64_t q2 = 0; q2 < {k[2]}; ++q2) {{",
              f"            const int64_t shift = q2 * {dil[2]} - {pad[2]};",
              f"            const int64_t first = -shift > 0 ? (-shift + {s2 - 1}) / {s2} : 0;",
              f"            const int64_t end = {size[2]} - shift > 0 ? ({size[2]} - shift + {s2 - 1}) / {s2} : 0;",
              "            const int64_t lo = first > t0 ? first : t0, hi = end < t0 + len ? end : t0 + len;",
              "            #pragma omp simd",
              "            for (int64_t o2 = lo; o2 < hi; ++o2) {",
              f"              const int64_t xi = base + o2 * {s2} + shift;"]
    lines += [f"              {line}" for line in _element(group)]
    if group.mode == "max":
        lines.append("              acc[o2 - t0] = (x > acc[o2 - t0] || x != x) ? x : acc[o2 - t0];  // NaN wins")
    else:
        lines.append("              acc[o2 - t0] += x;")
    return lines + ["            }", "          }", "        }", "      }"]


def _element(group: PoolGroup) -> list[str]:
    """`const float x` at input offset xi: x itself, or the prologue computed from its inputs there."""
    if not group.prologue:
        index = [v.name for v in group.inputs].index(group.x)
        return [f"const float x = {as_float(group.inputs[index], f'in{index}[xi]')};"]
    return prologue_lines(group) + [f"const float x = v_{group.x};"]


def prologue_lines(group: PoolGroup) -> list[str]:
    """The prologue's inputs loaded at input offset `xi`, then its ops (x ends in v_<x>); both variants' code."""
    names = {}
    lines = loads(group, group.in_shape, "xi", names, only=group.prologue_inputs())
    return [line.strip() for line in lines + body_lines(group.prologue, names)]


def _finish(group: PoolGroup, g: dict) -> list[str]:
    """Per output of the tile: the pooled value (average: over torch's divisor), the epilogue, the stores."""
    lines = ["      for (int64_t j = 0; j < len; ++j) {",
             "        const int64_t o2 = t0 + j;",
             f"        const int64_t flat = row * {g['out'][2]}LL + o2;",
             f"        const float v_{group.result} = {_pooled(group, g)};"]
    names = {group.result: f"v_{group.result}"}
    others = [v.name for v in group.inputs if v.name not in group.prologue_inputs()]
    body = loads(group, group.out_shape, "flat", names, only=others) + body_lines(group.epilogue, names)
    body += [store(o, f"out{j}[flat]", names[o.name]) for j, o in enumerate(group.outputs)]
    return lines + [f"        {line.strip()}" for line in body] + ["      }"]


def _pooled(group: PoolGroup, g: dict) -> str:
    if group.mode == "max":
        return "acc[j]"
    if group.divisor_override:
        return f"acc[j] / {float(group.divisor_override)}f"
    size, stride, pad, k = g["size"], g["stride"], g["padding"], g["kernel"]
    counts = []
    for d, o in ((0, "o0"), (1, "o1"), (2, "o2")):
        start = f"({o} * {stride[d]} - {pad[d]})"
        end = _min(f"{start} + {k[d]}", str(size[d] + pad[d]))
        if group.count_include_pad:
            counts.append(f"({end} - {start})")
        else:
            counts.append(_max(f"{_min(end, str(size[d]))} - {_max(start, '0')}", "0"))
    return f"acc[j] / (float)({' * '.join(counts)})"


def _min(a: str, b: str) -> str:
    return f"(({a}) < ({b}) ? ({a}) : ({b}))"


def _max(a: str, b: str) -> str:
    return f"(({a}) > ({b}) ? ({a}) : ({b}))"
