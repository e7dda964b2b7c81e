"""A pointwise op after a reshape of a kernel's result runs before the reshape, in the result's own shape, so it
joins that kernel's epilogue. GroupNorm computes in [N, G, C/G, H*W] and its result is viewed back to
[N, C, H, W] before the module's next op: KernelBench's Conv2d_GroupNorm_Scale_MaxPool (level2/85) multiplied
by a [C, 1, 1] scale in a kernel of its own, a whole read and write of the activation. A view ends a kernel
(partition.py pushes it between kernels); the op moved before it does not.

The op's other operands are viewed to match: a reshape pairs groups of dims whose sizes multiply to the same
(here [2] with [2], [16, 4] with [64], [196] with [14, 14]), and an operand that is whole or broadcast over
each group of the view's shape is the same per group of the source's shape. Only contiguous reshapes (view,
_unsafe_view, reshape) read by nothing but the op, of a value a kernel computes (a view of forward's inputs
stays where it is: an op after it fuses forward into the next kernel as it did)."""

from __future__ import annotations

from dataclasses import replace
from math import prod

from kernelsmith.compiler.graph import Graph, Node, consumers_of
from kernelsmith.compiler.lowering import kind_of

ALIASES = {"view.default", "_unsafe_view.default", "reshape.default"}
COMPUTED = {"pointwise", "reduction", "variance", "gemm", "conv", "pool"}  # kinds whose result is a kernel's


def sink(graph: Graph) -> Graph:
    """The graph with every such op moved before its reshape, one at a time until none is left."""
    while (moved := _sink_one(graph)) is not None:
        graph = moved
    return graph


def _sink_one(graph: Graph) -> Graph | None:
    nodes, consumers, values = {n.name: n for n in graph.nodes}, consumers_of(graph), graph.values()
    for view in graph.nodes:
        found = _movable(view, nodes, consumers, values)
        if found:
            op, operands = found
            return replace(graph, nodes=_rewritten(graph.nodes, view, values[view.args[0]].shape, op, operands))
    return None


def _movable(view: Node, nodes: dict, consumers: dict, values: dict):
    """(the op, {operand: its shape in the source's dims}) when the op after `view` can move before it."""
    source = view.args[0] if view.target in ALIASES else None
    if source not in nodes or kind_of(nodes[source]) not in COMPUTED or not values[source].contiguous:
        return None
    readers = consumers.get(view.name, [])
    op = nodes.get(readers[0]) if len(readers) == 1 else None
    if op is None or kind_of(op) != "pointwise" or tuple(op.shape) != tuple(view.shape) or op.kwargs:
        return None
    operands = {}
    for name in {a for a in op.args if isinstance(a, str) and a != view.name}:
        # broadcast operands only: a whole one would be viewed to the source's shape, a view the next round
        # would move the op back across
        shape = regrouped(values[name].shape, view.shape, values[source].shape)
        if shape is None or not values[name].contiguous or prod(values[name].shape) >= prod(op.shape):
            return None
        operands[name] = (shape, values[name].dtype)
    return op, operands


def regrouped(operand: tuple, after: tuple, before: tuple) -> tuple | None:
    """The operand's shape in `before`'s dims, where it broadcasts against `after` (a reshape of `before`): per
    group of paired dims, whole or all ones. None where a group is partly broadcast."""
    operand = (1,) * (len(after) - len(operand)) + tuple(operand)
    if len(operand) != len(after):
        return None
    shape = []
    for dims_before, dims_after in _groups(before, after):
        taken = [operand[i] for i in dims_after]
        if all(t == 1 for t in taken):
            shape += [1] * len(dims_before)
        elif all(t == after[i] for t, i in zip(taken, dims_after)):
            shape += [before[i] for i in dims_before]
        else:
            return None
    return tuple(shape)


def _groups(before: tuple, after: tuple) -> list[tuple[list[int], list[int]]]:
    """Runs of dims of the two shapes whose sizes multiply to the same, in order."""
    ends_before, ends_after = _prefix_ends(before), _prefix_ends(after)
    cuts = sorted(set(ends_before) & set(ends_after))
    groups, start_b, start_a = [], 0, 0
    for cut in cuts:
        stop_b, stop_a = ends_before[cut], ends_after[cut]
        groups.append((list(range(start_b, stop_b)), list(range(start_a, stop_a))))
        start_b, start_a = stop_b, stop_a
    return groups


def _prefix_ends(shape: tuple) -> dict[int, int]:
    """product of the first k dims -> the last k giving it (size-1 dims join the run before them)."""
    ends = {}
    for k in range(1, len(shape) + 1):
        ends[prod(shape[:k])] = k
    return ends


def _rewritten(nodes: list[Node], view: Node, shape: tuple, op: Node,
               operands: dict[str, tuple[tuple, str]]) -> list[Node]:
    """The nodes with `view` gone and `op` replaced by its operands' views, the op on the view's source (of
    `shape`), and the reshape of that under the op's name (its readers see what they saw)."""
    source, shape = view.args[0], tuple(shape)
    new, renamed = [], {view.name: source}
    for name, (want, dtype) in sorted(operands.items()):
        renamed[name] = f"{name}_as_{op.name}"
        new.append(Node(renamed[name], "view.default", [name, list(want)], {}, want, dtype))
    early = replace(op, name=f"{op.name}_early", args=[renamed.get(a, a) if isinstance(a, str) else a for a in op.args],
                    shape=shape)
    new += [early, Node(op.name, "view.default", [early.name, list(op.shape)], {}, op.shape, op.dtype)]
    out = []
    for node in nodes:
        if node.name == op.name:
            out += new
        elif node.name != view.name:
            out.append(node)
    return out
