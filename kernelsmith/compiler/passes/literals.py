"""Numbers forward makes as tensors (`torch.tensor(0.0, device=x.device)`, and the `scalar_tensor` that
masked_fill's decomposition makes of its fill value), inlined into the nodes that read them, as if forward
had written `torch.min(x, 0.0)`."""

from __future__ import annotations

import torch

from kernelsmith.compiler.dtypes import FLOATS, HALVES, dtype_name
from kernelsmith.compiler.graph import CaptureError, Node, reads
from kernelsmith.compiler.lowering import kind_of


def require_number(value: torch.Tensor) -> None:
    """Only a 0-dim float32 or int64 tensor stands for a number."""
    if value.dim() != 0 or value.dtype not in (torch.float32, torch.int64):
        raise CaptureError(f"forward makes a {dtype_name(value.dtype)} tensor of shape "
                           f"{list(value.shape)} from Python data; only 0-dim float32 or int64 numbers are supported")


def inline(nodes: list[Node], numbers: dict[str, float | int]) -> list[Node]:
    """Each number's name in a node's arguments becomes its value. Only pointwise ops may read
    one: a number means the same thing there. A pointwise op over numbers only is computed here
    and becomes a number too (`numbers` learns it)."""
    kept = []
    for node in nodes:
        if _is_number(node):
            numbers[node.name] = _scalar(node)  # masked_fill's fill value, logsigmoid's 0, as the decompositions make them
            continue
        names = set(reads(node))
        if not names & set(numbers):
            kept.append(node)
            continue
        if kind_of(node) != "pointwise":
            raise CaptureError(f"a constant tensor made in forward feeds {node.target}; "
                               "only pointwise ops may read one")
        if names <= set(numbers):  # clone(c), sqrt(c): a number too
            numbers[node.name] = _fold(node, numbers)
            continue
        node.args = _substitute(node.args, numbers)
        node.kwargs = dict(zip(node.kwargs, _substitute(list(node.kwargs.values()), numbers)))
        kept.append(node)
    return kept


def _is_number(node: Node) -> bool:
    """scalar_tensor, or a full of shape []: a 0-dim float or int64 tensor broadcasts as a number does."""
    made = node.target == "scalar_tensor.default" or node.target == "full.default" and node.args[0] == []
    return made and node.dtype in (*FLOATS, "int64")


def _scalar(node: Node) -> float | int:
    """Its value as eager holds it: a bfloat16 or float16 fill value rounded to that dtype."""
    value = node.args[-1]
    if node.dtype in HALVES:
        return torch.tensor(float(value), dtype=getattr(torch, node.dtype)).item()
    return int(value) if node.dtype == "int64" else float(value)


def _fold(node: Node, numbers: dict[str, float | int]) -> float | int:
    """A pointwise op over numbers only, computed once here with the ATen op the graph names."""
    op = torch.ops.aten
    for part in node.target.split("."):
        op = getattr(op, part)

    def tensor(value):
        return torch.tensor(value, dtype=torch.int64 if isinstance(value, int) else torch.float32)
    tensors = {name: tensor(numbers[name]) for name in reads(node)}
    kwargs = dict(zip(node.kwargs, _substitute(list(node.kwargs.values()), tensors)))
    result = op(*_substitute(node.args, tensors), **kwargs)
    require_number(result)
    return result.item()


def _substitute(args: list, values: dict) -> list:
    return [values.get(a, a) if isinstance(a, str) else _substitute(a, values) if isinstance(a, list) else a
            for a in args]
