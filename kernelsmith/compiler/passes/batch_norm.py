"""Batch norm in inference mode as a pointwise chain with per-channel parameters:
`(x - mean) / sqrt(var + eps) * weight + bias` (`bn_scale` is the division), each parameter
viewed as [C, 1, ...]. The chain fuses with the pointwise work around it."""

from __future__ import annotations

from dataclasses import replace

from kernelsmith.compiler.graph import Graph, Node
from kernelsmith.compiler.ir import Value
from kernelsmith.compiler.passes.channels import channel_view
from kernelsmith.compiler.passes.multi_output import BATCH_NORM


def expand(graph: Graph) -> Graph:
    """Each folded batch norm node replaced by its chain; the consumers of its input and of the
    chain's links say who reads them now."""
    values, consumers, nodes = graph.values(), dict(graph.consumers), []
    for node in graph.nodes:
        nodes += _chain(node, values, consumers) if node.target == BATCH_NORM else [node]
    return replace(graph, nodes=nodes, consumers=consumers)


def _chain(node: Node, values: dict[str, Value], consumers: dict[str, list[str]]) -> list[Node]:
    x, weight, bias, mean, var, _momentum, eps = node.args
    rank = len(values[x].shape)
    views, params = [], []
    for param in (mean, var, weight, bias):
        made, name = channel_view(param, values.get(param), rank)
        views += made
        params.append(name)
    links = _links(node, x, params, float(eps))
    replaced = node.kwargs["replaces"]  # x's reader is now the chain's first link
    consumers[x] = [links[0].name if c == replaced else c for c in consumers.get(x, [])]
    for link, reader in zip(links, links[1:]):
        consumers[link.name] = [reader.name]
    return views + links


def _links(node: Node, x: str, params: list[str | None], eps: float) -> list[Node]:
    """sub, bn_scale, then mul by the weight and add of the bias when the module has them; the
    last link takes the batch norm's name."""
    mean, var, weight, bias = params
    steps = [("sub", [x, mean], {}), ("bn_scale", [None, var], {"eps": eps})]
    steps += [("mul", [None, weight], {})] if weight else []
    steps += [("add", [None, bias], {})] if bias else []
    links, previous = [], None
    for i, (target, args, kwargs) in enumerate(steps):
        name = node.name if i == len(steps) - 1 else f"{node.name}_{i}"
        links.append(Node(name, target, [previous if a is None else a for a in args], kwargs, node.shape, node.dtype))
        previous = name
    return links
