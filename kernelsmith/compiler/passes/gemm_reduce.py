"""A sum or mean over a GEMM's output features is a GEMM against the summed weight:
`(x @ B).sum(1) = x @ B.sum(1)`, [M, K] @ [K, 1] in place of [M, K] @ [K, N] and a reduction of the
[M, N] product (KernelBench's Gemm_Divide_Sum_Scaling: N times less arithmetic, and the product is never
written). Numbers the product is multiplied or divided by on the way to the reduction commute with it
and move after the smaller GEMM; addmm's bias is summed alike. The weight's sum runs on every call,
so weights that change between calls (a harness's fresh ones) give the right answer.

Only where every value on the way feeds nothing but the next step, so no one else reads the product."""

from __future__ import annotations

from dataclasses import replace

from kernelsmith.compiler.graph import Graph, Node
from kernelsmith.compiler.lowering import base
from kernelsmith.compiler.passes import reduce_chain
from kernelsmith.compiler.passes.gemm_scale import scale_factor

def fold(graph: Graph) -> Graph:
    """The graph with each such reduction rewritten; the same graph, untouched, when there is none."""
    return reduce_chain.fold_matches(graph, _match, _rewrite)


def _match(node: Node, nodes: dict[str, Node], consumers: dict, values: dict) -> tuple[Node, list[Node]] | None:
    """(the GEMM, the scalings between it and the reduction, GEMM side first) when `node` is a reduction
    over the last dim of a 2-d GEMM's product that only it reads, else None."""
    if node.target not in reduce_chain.REDUCTIONS or node.kwargs or len(node.args) < 2 or \
            not isinstance(node.args[1], list):
        return None
    if node.args[1] not in ([1], [-1]):  # over the features only (a sum over all dims has dims None)
        return None
    gemm, chain = reduce_chain.producer_chain(node, nodes, consumers, _scaled)
    if gemm is None or base(gemm.target) not in ("mm", "addmm"):
        return None
    if len(gemm.shape) != 2 or gemm.dtype != node.dtype or not _bias_is_a_row(gemm, values):
        return None
    return gemm, chain


def _scaled(node: Node) -> str | None:
    """The value a scaling multiplies or divides, or None for any other op."""
    return next(a for a in node.args if isinstance(a, str)) if scale_factor(node) is not None else None


def _bias_is_a_row(gemm: Node, values: dict) -> bool:
    """mm, or addmm with a bias of one element per output feature (nn.Linear's)."""
    if base(gemm.target) == "mm":
        return True
    bias = gemm.args[0]
    return isinstance(bias, str) and tuple(values[bias].shape) in ((gemm.shape[1],), (1, gemm.shape[1]))


def _rewrite(reduction: Node, found: tuple[Node, list[Node]], nodes: dict[str, Node], values: dict) -> list[Node]:
    """The nodes that replace the GEMM, the scalings and the reduction, the last named as the reduction."""
    gemm, chain = found
    (m, n), dtype, name = gemm.shape, gemm.dtype, reduction.name
    new = _weight_sum(gemm.args[-1], name, nodes, values, dtype)
    if base(gemm.target) == "addmm":
        bias = gemm.args[0]
        rank = len(values[bias].shape)  # [N] or [1, N] -> [1] or [1, 1], a row of the one output feature
        new.append(Node(f"{name}_bsum", "sum.dim_IntList", [bias, list(range(rank)), True], {}, (1,) * rank, dtype))
        args = [new[-1].name, gemm.args[1], new[-2].name]
    else:
        args = [gemm.args[0], new[-1].name]
    new.append(Node(f"{name}_gemv", gemm.target, args, gemm.kwargs, (m, 1), dtype))
    for op in chain:
        new.append(replace(op, name=f"{op.name}_gemv", args=[new[-1].name if isinstance(a, str) else a
                                                               for a in op.args], shape=(m, 1)))
    if reduction.target == "mean.dim":
        new.append(Node(f"{name}_mean", "div.Tensor", [new[-1].name, n], {}, (m, 1), dtype))
    if tuple(reduction.shape) == (m, 1):
        return new[:-1] + [replace(new[-1], name=name)]
    return new + [Node(name, "view.default", [new[-1].name, [m]], {}, (m,), dtype)]


TRANSPOSES = {"t.default": None, "permute.default": [1, 0], "transpose.int": None}


def _weight_sum(weight: str, name: str, nodes: dict[str, Node], values: dict, dtype: str) -> list[Node]:
    """Nodes whose last is B summed over its columns, [K, 1]. nn.Linear's B is W^T: W [N, K] is summed down
    its rows instead, reading W where it lies (a column sum of W^T strides N elements between loads), and the
    [1, K] result viewed as [K, 1]."""
    k = values[weight].shape[0]
    source = nodes.get(weight)
    if source is not None and source.target in TRANSPOSES and len(values[source.args[0]].shape) == 2 and \
            (TRANSPOSES[source.target] is None or list(source.args[1]) == TRANSPOSES[source.target]):
        rows = Node(f"{name}_wsum_rows", "sum.dim_IntList", [source.args[0], [0], True], {}, (1, k), dtype)
        return [rows, Node(f"{name}_wsum", "view.default", [rows.name, [k, 1]], {}, (k, 1), dtype)]
    return [Node(f"{name}_wsum", "sum.dim_IntList", [weight, [1], True], {}, (k, 1), dtype)]
