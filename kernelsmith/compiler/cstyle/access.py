"""How a kernel reads one input at a flat index of its index space, shared by both generators.

- dense:   the input has the index space's shape and is contiguous: offset = flat index.
- scalar:  one element: offset 0.
- strided: anything else that broadcasts to the index space (a bias [C, 1, 1] against
           [N, C, H, W], a permuted view, an expand): the binding passes the strides of
           `x.expand(shape)` (0 along broadcast dims) and the kernel turns the flat index into
           a multi-index with the shape baked in as constants.
Whether an input is contiguous is known when the plan is made (views are tracked), and the
binding checks it at run time with a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

MAX_RANK = 8
# A flat index below this many elements is turned into a multi-index in 32-bit unsigned arithmetic: a division
# by a constant is then a multiply-high and a shift, where a 64-bit one is a multi-word sequence several times
# longer, and a broadcast read (a conv bias [C, 1, 1] in [N, C, H, W]) pays one per dim on every element.
NARROW_LIMIT = 2 ** 32


def broadcastable(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    if len(shape) > len(to):
        return False
    padded = (1,) * (len(to) - len(shape)) + tuple(shape)
    return all(s in (1, t) for s, t in zip(padded, to))


@dataclass
class Access:
    mode: str  # dense | scalar | strided
    shape: tuple[int, ...]  # the index space
    value_shape: tuple[int, ...] = ()  # the input's shape, left-padded with 1s to the space's rank

    def offset_expr(self, flat: str, strides: str) -> str:
        """C expression of the element offset at flat index `flat` (an int64 expression below the
        space's element count).
        `strides` names the int64 array holding this input's expanded strides (strided only)."""
        if self.mode == "dense":
            return flat
        if self.mode == "scalar":
            return "0"
        narrow = prod(self.shape) <= NARROW_LIMIT  # every flat index of the space fits 32 bits unsigned
        terms, rest, suffix = [], f"((unsigned){flat})" if narrow else flat, "u" if narrow else "LL"
        for dim in reversed(range(len(self.shape))):
            size = self.shape[dim]
            if self.value_shape and self.value_shape[dim] == 1 and size > 1:
                rest = f"({rest} / {size}{suffix})"  # broadcast along this dim: stride 0, no term
                continue
            index = f"({rest} % {size}{suffix})" if dim > 0 else rest
            terms.append(f"{index} * {strides}[{dim}]")  # the int64 stride widens the product
            rest = f"({rest} / {size}{suffix})"
        return "(" + " + ".join(reversed(terms)) + ")" if terms else "0"


def access_for(value_shape: tuple[int, ...], contiguous: bool, space: tuple[int, ...]) -> Access:
    if prod(value_shape) == 1:
        return Access("scalar", space)
    if tuple(value_shape) == tuple(space) and contiguous:
        return Access("dense", space)
    if not broadcastable(value_shape, space):
        raise ValueError(f"shape {value_shape} does not broadcast to {space}")
    if len(space) > MAX_RANK:
        raise ValueError(f"rank {len(space)} is above {MAX_RANK}")
    padded = (1,) * (len(space) - len(value_shape)) + tuple(value_shape)
    return Access("strided", space, padded)
