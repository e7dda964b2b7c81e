"""A number a GEMM operand is multiplied by becomes the GEMM's alpha: `(q * s) @ (k^T * s)` is
`s * s * (q @ k^T)`, one cuBLAS call that reads q and k^T where they lie, instead of a pointwise
kernel writing each scaled operand first (scaled dot-product attention scales both).

Only where the scaled value feeds nothing but the views on the way to the GEMM, and those views
see the same strides on the value before scaling: eager's `x * s` keeps x's strides when x is
contiguous or a permutation of a contiguous value."""

from __future__ import annotations

import math
from dataclasses import replace

from kernelsmith.compiler.graph import Graph, Node, consumers_of
from kernelsmith.compiler.ir import Value
from kernelsmith.compiler.lowering import base, kind_of

PERMUTATIONS = {"permute", "transpose", "t"}


def fold(graph: Graph) -> Graph:
    """The graph with each movable scale folded; the same graph, untouched, when there is none."""
    nodes, consumers, values = {n.name: n for n in graph.nodes}, consumers_of(graph), graph.values()
    folded = [pair for gemm in [n for n in graph.nodes if kind_of(n) == "gemm"]
              for position in ((1, 2) if base(gemm.target) == "addmm" else (0, 1))
              for pair in [_fold_operand(nodes, consumers, values, gemm.name, position)] if pair]
    if not folded:
        return graph
    kept = [nodes[n.name] for n in graph.nodes if n.name in nodes]
    return replace(graph, nodes=kept, consumers=_without(graph.consumers, folded))


def _without(consumers: dict[str, list[str]], folded: list[tuple[str, str, str]]) -> dict[str, list[str]]:
    """The graph's readers map with each folded scale gone: its reader reads the scaled value instead."""
    consumers = {name: list(readers) for name, readers in consumers.items()}
    for scale, source, reader in folded:
        consumers.pop(scale, None)
        consumers[source] = [reader if r == scale else r for r in consumers.get(source, [])]
    return consumers


def _fold_operand(nodes: dict[str, Node], consumers: dict, values: dict[str, Value], gemm: str,
                  position: int) -> tuple[str, str, str] | None:
    """Moves operand `position`'s scale, if it has one that may move, into the GEMM's alpha: (the scale
    node, the value it scaled, the node that now reads that value), or None."""
    reader, name = nodes[gemm], nodes[gemm].args[position]
    while name in nodes and kind_of(nodes[name]) == "view" and consumers.get(name) == [reader.name]:
        reader, name = nodes[name], nodes[name].args[0]
    if name not in nodes or consumers.get(name) != [reader.name]:
        return None
    scaled = _scaled(nodes[name], nodes, values)
    if scaled is None:
        return None
    source, factor = scaled
    nodes[reader.name] = replace(reader, args=[source if a == name else a for a in reader.args])
    alpha = float(nodes[gemm].kwargs.get("alpha", 1.0)) * factor
    nodes[gemm] = replace(nodes[gemm], kwargs={**nodes[gemm].kwargs, "alpha": alpha})
    del nodes[name]
    return name, source, reader.name


def _scaled(node: Node, nodes: dict[str, Node], values: dict[str, Value]) -> tuple[str, float] | None:
    """(x, s) when `node` is x * s, s * x or x / s for a number s and an x whose strides the views keep."""
    factor = scale_factor(node)
    if factor is None:
        return None
    source = next(a for a in node.args if isinstance(a, str))
    keeps_strides = values[source].contiguous or (source in nodes and base(nodes[source].target) in PERMUTATIONS
                                                  and values[nodes[source].args[0]].contiguous)
    return (source, factor) if keeps_strides and values[source].dtype == node.dtype else None


def scale_factor(node: Node) -> float | None:
    name, args = base(node.target), node.args
    numbers = [a for a in args if isinstance(a, (int, float)) and not isinstance(a, bool)]
    if name not in ("mul", "div") or len(args) != 2 or len(numbers) != 1 or node.kwargs:
        return None
    if name == "div" and (not isinstance(args[0], str) or numbers[0] == 0):
        return None
    factor = float(numbers[0]) if name == "mul" else 1.0 / float(numbers[0])
    return factor if math.isfinite(factor) else None
