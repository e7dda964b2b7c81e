"""A convolution's bias as the first op of its epilogue: `conv(x, w) + b.view(C, 1, ...)`, so
that both targets run the library's convolution without a bias and fuse the add."""

from __future__ import annotations

from dataclasses import replace

from kernelsmith.compiler.graph import Graph, Node
from kernelsmith.compiler.ir import Value
from kernelsmith.compiler.lowering import kind_of
from kernelsmith.compiler.passes.channels import channel_view


def split(graph: Graph) -> Graph:
    values, consumers, nodes = graph.values(), dict(graph.consumers), []
    for node in graph.nodes:
        nodes += _split(node, values, consumers) if kind_of(node) == "conv" and node.args[2] else [node]
    return replace(graph, nodes=nodes, consumers=consumers)


def _split(node: Node, values: dict[str, Value], consumers: dict[str, list[str]]) -> list[Node]:
    x, w, bias, *rest = node.args
    conv = Node(f"{node.name}_nobias", node.target, [x, w, None, *rest], node.kwargs, node.shape, node.dtype,
                node.contiguous)
    views, channels = channel_view(bias, values[bias], len(node.shape))
    consumers[conv.name] = [node.name]
    return [conv, *views, Node(node.name, "add.Tensor", [conv.name, channels], {}, node.shape, node.dtype,
                               node.contiguous)]
