"""The captured graph: core ATen nodes in forward's order, with shapes and dtypes, and who reads
each value. capture.py makes it, passes/ rewrite it, partition.py reads it; no torch here."""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelsmith.compiler.ir import Value


class CaptureError(Exception):
    """The task's graph could not be captured (data-dependent control flow, unsupported
    Python in forward, ...). The message says why."""


@dataclass
class Node:
    name: str
    target: str  # the ATen overload, e.g. "add.Tensor", "_softmax.default"
    args: list  # value names, scalars, lists, None
    kwargs: dict
    shape: tuple[int, ...]
    dtype: str
    contiguous: bool = True


@dataclass
class Graph:
    inputs: list[Value]  # forward's arguments, in order
    params: list[Value]  # parameters and buffers, reached as self.<path>
    nodes: list[Node]
    outputs: list[str]
    returns_tuple: bool
    consumers: dict[str, list[str]] = field(default_factory=dict)  # value -> nodes that read it
    init: list[str] = field(default_factory=list)  # constructor lines making its constants (passes/constants.py)

    def values(self) -> dict[str, Value]:
        found = {v.name: v for v in self.inputs + self.params}
        found.update({n.name: Value(n.name, n.shape, n.dtype, contiguous=n.contiguous) for n in self.nodes})
        return found


def consumers_of(graph: Graph) -> dict[str, list[str]]:
    """value -> the nodes that read it ("output" for forward's return)."""
    found: dict[str, list[str]] = {}
    for node in graph.nodes:
        for name in reads(node):
            found.setdefault(name, []).append(node.name)
    for name in graph.outputs:
        found.setdefault(name, []).append("output")
    return found


OPTIONS = ("dtype", "layout", "device", "pin_memory", "memory_format")  # kwargs whose strings name no value


def reads(node: Node) -> list[str]:
    """The value names among a node's arguments and keyword arguments (not its dtype, device, layout or format)."""
    return _names_in(node.args) + _names_in([v for k, v in node.kwargs.items() if k not in OPTIONS])


def _names_in(args) -> list[str]:
    names = []
    for a in args:
        if isinstance(a, str):
            names.append(a)
        elif isinstance(a, list):
            names += _names_in(a)
    return names
