"""A reshape that leads to a reduction moves before the pointwise ops that make its operand, so they run in the
reshape's shape and join the reduction as its prologue. GroupNorm reads its operand as [N, G, C/G, H*W]:
KernelBench's Conv2d_Add_Scale_Sigmoid_GroupNorm (level2/21) ran the add, scale and sigmoid as the convolution's
epilogue, which wrote the whole activation and the statistics read it back, twice; run in the reduction, the
convolution's own output is read instead and the activation is never written.

This is view_sink.py the other way round, and runs after it: that pass moves a pointwise op after a reshape into
the kernel before it, this one moves a pointwise op before a reshape into the reduction after it. A reduction's
prologue costs what an epilogue would save; a library call's epilogue (a convolution's, a GEMM's) is a pass of its
own, so the reduction is where the op is cheaper. The operands are viewed to match, by the same pairing of dims
(view_sink.regrouped). Only a contiguous reshape of an op read by nothing else, whose operands are whole and
contiguous or broadcast per group of dims."""

from __future__ import annotations

from dataclasses import replace

from kernelsmith.compiler.graph import Graph, Node, consumers_of
from kernelsmith.compiler.lowering import kind_of
from kernelsmith.compiler.passes.view_sink import ALIASES, regrouped


def hoist(graph: Graph) -> Graph:
    """The graph with every such reshape moved up, one op at a time until none can move."""
    while (moved := _hoist_one(graph)) is not None:
        graph = moved
    return graph


def _hoist_one(graph: Graph) -> Graph | None:
    nodes, consumers, values = {n.name: n for n in graph.nodes}, consumers_of(graph), graph.values()
    for view in graph.nodes:
        if view.target not in ALIASES or not _feeds_reduction(view, nodes, consumers):
            continue
        found = _movable(view, nodes, consumers, values)
        if found:
            return replace(graph, nodes=_rewritten(graph.nodes, view, found))
    return None


def _feeds_reduction(value: Node, nodes: dict, consumers: dict) -> bool:
    """Whether a reduction reads the value, directly or through pointwise ops of its shape."""
    for reader in map(nodes.get, consumers.get(value.name, [])):
        if reader is None:
            continue
        if kind_of(reader) == "reduction" and reader.args[0] == value.name:
            return True
        if kind_of(reader) == "pointwise" and tuple(reader.shape) == tuple(value.shape) and \
                _feeds_reduction(reader, nodes, consumers):
            return True
    return False


def _movable(view: Node, nodes: dict, consumers: dict, values: dict) -> dict[str, tuple] | None:
    """{operand: its shape in the view's dims} when the pointwise op the view reads can run after it."""
    op = nodes.get(view.args[0])
    if op is None or kind_of(op) != "pointwise" or op.kwargs or consumers.get(op.name) != [view.name]:
        return None
    operands = {}
    for name in {a for a in op.args if isinstance(a, str)}:
        shape = regrouped(values[name].shape, op.shape, view.shape)
        if shape is None or not values[name].contiguous:
            return None
        operands[name] = (shape, values[name].dtype)
    return {"op": op, "operands": operands}


def _rewritten(nodes: list[Node], view: Node, found: dict) -> list[Node]:
    """The nodes with each operand of the op viewed to the reshape's dims, and the op on those views under the
    reshape's name (its readers see what they saw)."""
    op, renamed, new, taken = found["op"], {}, [], {n.name for n in nodes}
    earlier = {(n.args[0], tuple(n.shape)): n.name for n in nodes[:nodes.index(view)] if n.target == "view.default"}
    for name, (shape, dtype) in sorted(found["operands"].items()):
        if (name, tuple(shape)) in earlier:  # swish's x * sigmoid(x): one view of x, read once by the kernel
            renamed[name] = earlier[(name, tuple(shape))]
            continue
        renamed[name] = _fresh(f"{name.split('_as_')[0]}_as_{'x'.join(map(str, shape))}", taken)
        new.append(Node(renamed[name], "view.default", [name, list(shape)], {}, tuple(shape), dtype))
    late = replace(op, name=view.name, args=[renamed.get(a, a) if isinstance(a, str) else a for a in op.args],
                   shape=tuple(view.shape))
    out = []
    for node in nodes:
        if node.name == op.name:
            continue
        out += new + [late] if node.name == view.name else [node]
    return out


def _fresh(name: str, taken: set[str]) -> str:
    """name, or name_2, name_3, ... : the first not taken (it is taken from then on)."""
    candidates = (name if k == 1 else f"{name}_{k}" for k in range(1, len(taken) + 2))
    found = next(c for c in candidates if c not in taken)
    taken.add(found)
    return found
