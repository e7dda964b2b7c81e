"""Graph rewrites, one file each, every one Graph (or its nodes) in, Graph out.

After the export (capture.py runs them): literals.py inlines the numbers forward makes as
tensors, dead_code.py drops what no output needs. Before partitioning (`before_partition`):
multi_output.py folds ops with several results, batch_norm.py expands inference batch norm into
a pointwise chain, conv_bias.py makes a convolution's bias its first epilogue op, gemm_scale.py
moves a number a GEMM operand is multiplied by into the GEMM's alpha."""

from __future__ import annotations

from dataclasses import replace

from kernelsmith.compiler.graph import Graph
from kernelsmith.compiler.passes import batch_norm, conv_bias, gemm_scale, multi_output


def before_partition(graph: Graph) -> Graph:
    """Raises lowering.Unsupported for a result the kernels cannot give (batch norm's statistics)."""
    graph = replace(graph, nodes=multi_output.fold(graph.nodes))
    return gemm_scale.fold(conv_bias.split(batch_norm.expand(graph)))
