"""Nodes no output depends on: the training-mode buffer updates torch.export returns beside
forward's outputs (batch norm's running statistics), and the ops that only fed them."""

from __future__ import annotations

from kernelsmith.compiler.graph import Node, reads


def live(nodes: list[Node], outputs: list[str]) -> list[Node]:
    """The nodes that some output depends on, in their order."""
    wanted = set(outputs)
    for node in reversed(nodes):
        if node.name in wanted:
            wanted.update(reads(node))
    return [n for n in nodes if n.name in wanted]
