"""A per-channel parameter ([C]) as [C, 1, ...], so that it broadcasts along dim 1 of an
[N, C, *spatial] tensor: a view node, which the partitioner hoists to the start of forward."""

from __future__ import annotations

from kernelsmith.compiler.graph import Node
from kernelsmith.compiler.ir import Value


def channel_view(param: str | None, value: Value | None, rank: int) -> tuple[list[Node], str | None]:
    """(the view node, if one is needed; the name that broadcasts). Rank 2 needs none."""
    if param is None or rank <= 2:
        return [], param
    shape = (value.shape[0],) + (1,) * (rank - 2)
    view = Node(f"{param}_as_channels", "view.default", [param, list(shape)], {}, shape, value.dtype)
    return [view], view.name
