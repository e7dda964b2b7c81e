"""What gemm_reduce.py and conv_reduce.py share: a sum or mean read back, through a chain of ops that commute
with it, to the node that produces its operand; and the graph with each such match rewritten."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from kernelsmith.compiler.graph import Graph, Node, consumers_of

REDUCTIONS = {"sum.dim_IntList", "mean.dim"}


def producer_chain(reduction: Node, nodes: dict[str, Node], consumers: dict,
                   carried: Callable[[Node], str | None]) -> tuple[Node | None, list[Node]]:
    """(the producer, or None, and the ops between it and the reduction, producer side first). The walk goes
    back through ops `carried` accepts (it names the operand that carries the values, or gives None), each read
    by nothing but the next step; the producer too must be read by nothing but the chain."""
    chain, name, reader = [], reduction.args[0], reduction.name
    while name in nodes and consumers.get(name) == [reader] and (operand := carried(nodes[name])) is not None:
        chain.append(nodes[name])
        reader, name = name, operand
    producer = nodes.get(name) if consumers.get(name) == [reader] else None
    return producer, chain[::-1]


def fold_matches(graph: Graph, match: Callable, rewrite: Callable) -> Graph:
    """The graph with every node `match(node, nodes, consumers, values)` finds (a tuple whose first two are the
    producer and the chain) replaced by `rewrite(node, found, nodes, values)`'s nodes, the producer and the
    chain dropped; the same graph, untouched, when there is none."""
    nodes, consumers, values = {n.name: n for n in graph.nodes}, consumers_of(graph), graph.values()
    rewrites = {n.name: found for n in graph.nodes if (found := match(n, nodes, consumers, values))}
    if not rewrites:
        return graph
    gone = {n.name for producer, chain, *_ in rewrites.values() for n in [producer, *chain]}
    kept = []
    for node in graph.nodes:
        if node.name in rewrites:
            kept += rewrite(node, rewrites[node.name], nodes, values)
        elif node.name not in gone:
            kept.append(node)
    return replace(graph, nodes=kept)
