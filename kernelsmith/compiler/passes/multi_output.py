"""Ops with several results, and the getitems that pick them, folded into single-result nodes:
max.dim / min.dim into amax/argmax (amin/argmin), max pooling with indices into its values,
inference batch norm into its normalised output (passes/batch_norm.py expands that one), and
var_mean into a welford reduction (its mean) and the welford's variance right after it.

The graph's consumers stay those of the capture: the multi-result node, not the folded one, is
recorded as the reader of its operand (as it was before this pass had a file of its own)."""

from __future__ import annotations

from kernelsmith.compiler.graph import Node
from kernelsmith.compiler.lowering import Unsupported

BATCH_NORM = "_native_batch_norm_legit_no_training.default"
MAX_POOLS = ("max_pool1d_with_indices.default", "max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
EXTREMA = ("max.dim", "min.dim")
VAR_MEAN = "var_mean.correction"


def fold(nodes: list[Node]) -> list[Node]:
    multi = {n.name: n for n in nodes if n.target in EXTREMA + (BATCH_NORM,) + MAX_POOLS}
    picks = {(n.args[0], n.args[1]): n for n in nodes if n.target == "getitem"}
    var_means = {n.name for n in nodes if n.target == VAR_MEAN}
    folded = []
    for node in nodes:
        if node.name in var_means:
            folded += _var_mean(node, picks.get((node.name, 0)), picks.get((node.name, 1)))
        elif node.name not in multi and not (node.target == "getitem" and node.args[0] in var_means):
            picked = multi.get(node.args[0]) if node.target == "getitem" else None
            folded.append(node if picked is None else _fold_one(node, picked))
    return folded


def _var_mean(source: Node, var: Node | None, mean: Node | None) -> list[Node]:
    """(var, mean) = var_mean(x, dims): a welford reduction named as the mean, then its variance (when
    read) as a node of its own that reads the mean, so the partitioner meets them in that order."""
    like = mean or var
    mean_name = mean.name if mean else f"{source.name}_mean"
    nodes = [Node(mean_name, "welford.default", source.args, dict(source.kwargs), like.shape, like.dtype,
                  like.contiguous)]
    if var is not None:
        nodes.append(Node(var.name, "welford_variance.default", [mean_name], {}, var.shape, var.dtype,
                          var.contiguous))
    return nodes


def _fold_one(getitem: Node, source: Node) -> Node:
    if source.target == BATCH_NORM:
        return _batch_norm(getitem, source)
    if source.target in MAX_POOLS:
        return _max_pool(getitem, source)
    return _extremum(getitem, source)


def _batch_norm(getitem: Node, source: Node) -> Node:
    if getitem.args[1] != 0:
        raise Unsupported("batch norm statistics as outputs")
    return Node(getitem.name, BATCH_NORM, source.args, {"replaces": source.name}, getitem.shape, getitem.dtype)


def _max_pool(getitem: Node, source: Node) -> Node:
    if getitem.args[1] != 0:
        raise Unsupported("max pooling's indices as values")
    return Node(getitem.name, "max_pool", source.args, {}, getitem.shape, getitem.dtype)


def _extremum(getitem: Node, source: Node) -> Node:
    """Result 0 is the amax (amin) over the dim, result 1 its argmax (argmin)."""
    which = ("amax" if source.target == "max.dim" else "amin") if getitem.args[1] == 0 else \
        ("argmax" if source.target == "max.dim" else "argmin")
    dim, keep = source.args[1], source.args[2] if len(source.args) > 2 else False
    args = [source.args[0], [dim], keep] if which in ("amax", "amin") else [source.args[0], dim, keep]
    return Node(getitem.name, f"{which}.default", args, {}, getitem.shape,
                "int64" if which.startswith("arg") else getitem.dtype, getitem.contiguous)
