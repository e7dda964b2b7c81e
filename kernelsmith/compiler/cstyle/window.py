"""C code shared by both generators for ops over spatial windows (convolution on the CPU,
pooling on both): the output index decoded, and the window walked, in three spatial dims (a
missing leading dim has size 1, so one code path serves 1-, 2- and 3-d). Also the element of
a concatenation, which both generators read the same way."""

from __future__ import annotations

from collections.abc import Callable
from math import prod

from kernelsmith.compiler.cstyle.access import NARROW_LIMIT
from kernelsmith.compiler.ir import CatGroup, PoolGroup


def three(values, fill: int) -> tuple[int, ...]:
    """Per-spatial-dim values padded in front to three dims."""
    values = tuple(int(v) for v in values)
    return (fill,) * (3 - len(values)) + values


def narrowed(flat: str, numel: int) -> tuple[list[str], str, str]:
    """(a line, the index, the constants' suffix) that decode flat indices below `numel` in 32-bit unsigned
    arithmetic where they fit (access.NARROW_LIMIT), else as they are, in 64 bits."""
    if numel <= NARROW_LIMIT:
        return [f"const unsigned ks_flat = (unsigned){flat};"], "ks_flat", "u"
    return [], flat, "LL"


def decode(flat: str, out_shape: tuple[int, ...]) -> list[str]:
    """`n, c, o0, o1, o2` of the output element at `flat` ([N, C, *spatial], contiguous)."""
    out = three(out_shape[2:], 1)
    channels = out_shape[1]
    first, f, u = narrowed(flat, prod(out_shape))
    return first + [f"const int64_t o2 = {f} % {out[2]}{u}, o1 = {f} / {out[2]}{u} % {out[1]}{u}, "
                    f"o0 = {f} / {out[2] * out[1]}{u} % {out[0]}{u};",
                    f"const int64_t c = {f} / {prod(out)}{u} % {channels}{u}, n = {f} / {prod(out) * channels}{u};"]


def pool_lines(group: PoolGroup, load: str, element: Callable[[str], list[str]] | None = None) -> list[str]:
    """Lines that leave the pooled value in `v_<result>`; `load` formats an offset into x's read. With a
    prologue, `element(offset)` gives the lines that compute x at an input offset (`load` then names it)."""
    size = three(group.in_shape[2:], 1)
    kernel, stride = three(group.kernel, 1), three(group.stride, 1)
    padding, dilation = three(group.padding, 0), three(group.dilation, 1)
    offset = f"((n * {group.in_shape[1]} + c) * {size[0]} + i0) * {size[1] * size[2]} + i1 * {size[2]} + i2"
    computed = element(offset) if element else []
    x_at = load.format(offset)
    if group.mode == "max":
        return _max_window(group, kernel, stride, padding, dilation, size, computed, x_at)
    return _avg_window(group, kernel, stride, padding, size, computed, x_at)


def _max_window(group, kernel, stride, padding, dilation, size, computed, x_at) -> list[str]:
    lines = ["float acc = -INFINITY;"]
    for d in range(3):
        pad = "  " * d
        lines += [f"{pad}for (int64_t q{d} = 0; q{d} < {kernel[d]}; ++q{d}) {{",
                  f"{pad}  const int64_t i{d} = o{d} * {stride[d]} - {padding[d]} + q{d} * {dilation[d]};",
                  f"{pad}  if (i{d} < 0 || i{d} >= {size[d]}) continue;"]
    lines += [f"      {line}" for line in computed]
    lines += [f"      const float x = {x_at};", "      if (x > acc || x != x) acc = x;  // NaN wins, as in torch"]
    lines += ["  " * d + "}" for d in (2, 1, 0)]
    return lines + [f"const float v_{group.result} = acc;"]


def _avg_window(group, kernel, stride, padding, size, computed, x_at) -> list[str]:
    """torch's divisor: the window clipped to the padded input, or to the input itself."""
    lines = ["float acc = 0.0f;", "int64_t inside = 1, padded = 1;"]
    for d in range(3):
        start = f"o{d} * {stride[d]} - {padding[d]}"
        lines += [f"const int64_t s{d} = {start}, e{d} = s{d} + {kernel[d]} < {size[d] + padding[d]} ? "
                  f"s{d} + {kernel[d]} : {size[d] + padding[d]};",
                  f"const int64_t a{d} = s{d} < 0 ? 0 : s{d}, b{d} = e{d} < {size[d]} ? e{d} : {size[d]};",
                  f"padded *= e{d} - s{d}; inside *= b{d} > a{d} ? b{d} - a{d} : 0;"]
    loops = [f"for (int64_t i{d} = a{d}; i{d} < b{d}; ++i{d})" for d in range(3)]
    if computed:  # the prologue's lines at each element, in a block
        lines += [" ".join(loops) + " {"] + [f"  {line}" for line in computed] + [f"  acc += {x_at};", "}"]
    else:
        lines += [" ".join(loops) + f" acc += {x_at};"]
    if group.divisor_override:
        divisor = f"{float(group.divisor_override)}f"
    else:
        divisor = "(float)padded" if group.count_include_pad else "(float)inside"
    return lines + [f"const float v_{group.result} = acc / {divisor};"]


def cat_lines(group: CatGroup, read: Callable[[str, str], str]) -> list[str]:
    """Lines that leave element `flat` of torch.cat(parts, dim) in `v_<result>`: the output
    viewed as [outer, total, inner], the part that holds position j along dim read at
    (outer, j - start, inner). `read(part, offset)` formats one load."""
    inner, total = prod(group.out_shape[group.dim + 1:]), group.out_shape[group.dim]
    first, f, u = narrowed("flat", prod(group.out_shape))
    lines = first + [f"const int64_t cat_inner = {f} % {inner}{u}, cat_j = {f} / {inner}{u} % {total}{u}, "
                     f"cat_outer = {f} / {inner * total}{u};", f"float v_{group.result};"]
    start = 0
    for i, (part, size) in enumerate(zip(group.parts, group.sizes)):
        offset = f"(cat_outer * {size}LL + cat_j - {start}LL) * {inner}LL + cat_inner"
        test = "" if i == len(group.parts) - 1 else f"if (cat_j < {start + size}LL) "
        lines.append(("else " if i else "") + f"{test}v_{group.result} = {read(part, offset)};")
        start += size
    return lines
