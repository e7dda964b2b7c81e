"""Graph rewrites, one file each, every one Graph (or its nodes) in, Graph out.

After the export (capture.py runs them): literals.py inlines the numbers forward makes as
tensors, dead_code.py drops what no output needs. Before partitioning (`before_partition`):
multi_output.py folds ops with several results, batch_norm.py expands inference batch norm into
a pointwise chain, conv_bias.py makes a convolution's bias its first epilogue op, conv_reduce.py turns
a sum or mean over one spatial dim of a stride-1 convolution into a convolution over one dim fewer, gemm_reduce.py
turns a sum over a GEMM's output features into a GEMM against the summed weight, gemm_scale.py
moves a number a GEMM operand is multiplied by into the GEMM's alpha, view_sink.py moves a pointwise op
after a reshape of a kernel's result before the reshape, into that kernel's epilogue, and view_hoist.py moves a
reshape that leads to a reduction before the pointwise ops that make its operand, into the reduction's prologue."""

from __future__ import annotations

from dataclasses import replace

from kernelsmith.compiler.graph import Graph, consumers_of
from kernelsmith.compiler.passes import (batch_norm, conv_bias, conv_reduce, gemm_reduce, gemm_scale, multi_output,
                                         view_hoist, view_sink)


def before_partition(graph: Graph) -> Graph:
    """Raises lowering.Unsupported for a result the kernels cannot give (batch norm's statistics)."""
    graph = _readers(replace(graph, nodes=multi_output.fold(graph.nodes)))
    for rewrite in (batch_norm.expand, conv_bias.split, conv_reduce.fold, gemm_reduce.fold, gemm_scale.fold,
                    view_sink.sink, view_hoist.hoist):
        graph = _readers(rewrite(graph))
    return graph


def _readers(graph: Graph) -> Graph:
    """Who reads each value, read again from the nodes after a rewrite. The passes' own updates missed
    renamed results (fold's min.dim) and the inputs of the nodes they split (a convolution's x and weight)."""
    return replace(graph, consumers=consumers_of(graph))
