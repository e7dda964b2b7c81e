"""A sum or mean over one spatial dim of a stride-1 convolution is a convolution over one dim fewer.

Along that dim the output sums `x[d] * W[k]` over pairs whose output position lands inside the output, so
for each kernel tap k the sum reads a contiguous range of x: sum_o y[o] = sum_k W[k] * S_k with
S_k = x summed over range_k. Stacking S_k as K times the input channels (channel c*K + k) and the taps
the same way in the weight makes it one convolution with K*C_in input channels over the other dims:
KernelBench's ConvTranspose3d_Mean (mean over depth 32, kernel 3) does 32 / 3 times less arithmetic, and
the 3-d output is never written. S_k is the whole-dim sum less the few planes its range leaves out (a
padded border), so x is read about once. Ops between the convolution and the reduction that commute with
it move after the smaller convolution: scalings (sums and means), and adds of a tensor constant along the
dim, such as the convolution's bias (means only: a sum would count it O times).

Only for float32 (bfloat16 would round each S_k, a sum of L planes, before the convolution multiplies
it), groups 1, stride 1 along the dim, every tap's range non-empty, at least one spatial dim left, and
where every value on the way feeds nothing but the next step."""

from __future__ import annotations

from dataclasses import replace

from kernelsmith.compiler.graph import Graph, Node
from kernelsmith.compiler.lowering import kind_of
from kernelsmith.compiler.passes import reduce_chain
from kernelsmith.compiler.passes.gemm_scale import scale_factor

SHIFTS = {"add.Tensor", "sub.Tensor"}


def fold(graph: Graph) -> Graph:
    """The graph with each such reduction rewritten; the same graph, untouched, when there is none."""
    return reduce_chain.fold_matches(graph, _match, _rewrite)


def _match(node: Node, nodes: dict[str, Node], consumers: dict, values: dict):
    """(the convolution, the ops between it and the reduction, convolution side first, the dim) when `node`
    qualifies (the module docstring's conditions), else None."""
    dim = _reduced_dim(node)
    if dim is None:
        return None
    carried = lambda op: _chain_sides(op, values)[0] if _commutes(op, dim, node, values) else None  # noqa: E731
    conv, chain = reduce_chain.producer_chain(node, nodes, consumers, carried)
    if conv is None or not _convolution_fits(conv, dim, values):
        return None
    return conv, chain, dim


def _reduced_dim(node: Node) -> int | None:
    """The one spatial dim a float32 sum or mean (of rank 4 or 5) reduces, else None."""
    if node.target not in reduce_chain.REDUCTIONS or node.kwargs or len(node.args) < 2 or node.dtype != "float32":
        return None
    dims, rank = node.args[1], len(node.shape) if (len(node.args) > 2 and node.args[2]) else len(node.shape) + 1
    if not isinstance(dims, list) or len(dims) != 1 or rank < 4:
        return None
    dim = dims[0] % rank
    return dim if dim >= 2 else None


def _chain_sides(node: Node, values: dict) -> list[str]:
    """The operand of a chain op that carries the convolution's values: the one of the op's own shape."""
    return [a for a in node.args if isinstance(a, str) and tuple(values[a].shape) == tuple(node.shape)]


def _commutes(node: Node, dim: int, reduction: Node, values: dict) -> bool:
    """A scaling, or (under a mean) an add or subtract of a tensor or number constant along `dim`."""
    if scale_factor(node) is not None:
        return True
    if node.target not in SHIFTS or node.kwargs or reduction.target != "mean.dim" or len(_chain_sides(node, values)) != 1:
        return False
    (other,) = [a for a in node.args if a not in _chain_sides(node, values)]
    if not isinstance(other, str):
        return isinstance(other, (int, float)) and not isinstance(other, bool)
    shape, rank = values[other].shape, len(node.shape)
    return values[other].dtype == node.dtype and (len(shape) <= rank - 1 - dim or shape[dim - rank] == 1)


def _convolution_fits(conv: Node, dim: int, values: dict) -> bool:
    if kind_of(conv) != "conv" or conv.args[2] is not None or conv.dtype != "float32":
        return False
    stride, output_padding, groups = conv.args[3], conv.args[7], conv.args[8]
    axis = dim - 2
    if groups != 1 or stride[axis] != 1 or (conv.args[6] and output_padding[axis] != 0) or len(conv.shape) < 4:
        return False
    return all(lo < hi for lo, hi in tap_ranges(conv, dim, values))


def tap_ranges(conv: Node, dim: int, values: dict) -> list[tuple[int, int]]:
    """For each kernel tap k along `dim`, the range of x positions whose products land in the output.
    A convolution reads x[o + k*dilation - padding] at output o; a transposed one writes x[d] * W[k] to
    position d + k*dilation - padding."""
    x, w = values[conv.args[0]], values[conv.args[1]]
    length, taps, out = x.shape[dim], w.shape[dim], conv.shape[dim]
    padding, dilation, transposed = conv.args[4][dim - 2], conv.args[5][dim - 2], conv.args[6]
    ranges = []
    for k in range(taps):
        start = padding - k * dilation if transposed else k * dilation - padding
        ranges.append((max(start, 0), min(start + out, length)))
    return ranges


def _rewrite(reduction: Node, found: tuple[Node, list[Node], int], _nodes: dict, values: dict) -> list[Node]:
    """The nodes that replace the convolution, the chain and the reduction, the last named as the reduction."""
    conv, chain, dim = found
    name, dtype = reduction.name, reduction.dtype
    new = _stacked_sums(conv.args[0], name, dim, tap_ranges(conv, dim, values), values, dtype)
    new += _stacked_weight(conv.args[1], name, dim, bool(conv.args[6]), values, dtype)
    drop = lambda seq: [v for i, v in enumerate(seq) if i != dim - 2]  # noqa: E731
    stride, padding, dilation, transposed, output_padding = conv.args[3:8]
    small = tuple(s for i, s in enumerate(conv.shape) if i != dim)
    new.append(Node(f"{name}_conv", conv.target, [f"{name}_x", f"{name}_w", None, drop(stride), drop(padding),
                                                   drop(dilation), transposed, drop(output_padding), 1], {}, small, dtype))
    if reduction.target == "mean.dim":
        new.append(Node(f"{name}_mean", "div.Tensor", [new[-1].name, conv.shape[dim]], {}, small, dtype))
    kept = tuple(1 if i == dim else s for i, s in enumerate(conv.shape))
    new.append(Node(f"{name}_keep", "view.default", [new[-1].name, list(kept)], {}, kept, dtype))
    for op in chain:
        carried = _chain_sides(op, values)[0]
        new.append(replace(op, name=f"{op.name}_small", args=[new[-1].name if a == carried else a for a in op.args],
                           shape=kept))
    if tuple(reduction.shape) == kept:
        return new[:-1] + [replace(new[-1], name=name)]
    return new + [Node(name, "view.default", [new[-1].name, list(reduction.shape)], {}, reduction.shape, dtype)]


def _stacked_sums(x: str, name: str, dim: int, ranges: list[tuple[int, int]], values: dict, dtype: str) -> list[Node]:
    """Nodes whose last (NAME_x) is [N, C*K, rest]: channel c*K + k holds x summed over ranges[k] along dim."""
    shape = values[x].shape
    rest = tuple(s for i, s in enumerate(shape) if i != dim)
    total = Node(f"{name}_xsum", "sum.dim_IntList", [x, [dim], False], {}, rest, dtype)
    new, taps = [total], []
    for k, (lo, hi) in enumerate(ranges):
        tap = total.name
        for part, (start, stop) in enumerate(((0, lo), (hi, shape[dim]))):
            if start < stop:
                new += _minus_planes(x, tap, f"{name}_tap{k}_{part}", dim, start, stop, rest, dtype)
                tap = new[-1].name
        lifted = rest[:2] + (1,) + rest[2:]
        new.append(Node(f"{name}_tap{k}", "view.default", [tap, list(lifted)], {}, lifted, dtype))
        taps.append(new[-1].name)
    stacked = rest[:2] + (len(ranges),) + rest[2:]
    new.append(Node(f"{name}_stack", "cat.default", [taps, 2], {}, stacked, dtype))
    flat = (rest[0], rest[1] * len(ranges)) + rest[2:]
    return new + [Node(f"{name}_x", "view.default", [new[-1].name, list(flat)], {}, flat, dtype)]


def _minus_planes(x: str, tap: str, name: str, dim: int, start: int, stop: int, rest: tuple, dtype: str) -> list[Node]:
    """tap - x[start:stop] summed along dim."""
    shape = rest[:dim] + (stop - start,) + rest[dim:]
    planes = Node(f"{name}_planes", "slice.Tensor", [x, dim, start, stop], {}, shape, dtype, False)
    summed = Node(f"{name}_sum", "sum.dim_IntList", [planes.name, [dim], False], {}, rest, dtype)
    return [planes, summed, Node(f"{name}_less", "sub.Tensor", [tap, summed.name], {}, rest, dtype)]


def _stacked_weight(w: str, name: str, dim: int, transposed: bool, values: dict, dtype: str) -> list[Node]:
    """Nodes whose last (NAME_w) is the weight with the dim's taps moved next to the input channels and
    merged into them: [C_out, C_in*K, rest] (a transposed convolution's [C_in*K, C_out, rest])."""
    shape = values[w].shape
    order = [0, 1, dim] + [i for i in range(2, len(shape)) if i != dim] if not transposed else \
        [0, dim, 1] + [i for i in range(2, len(shape)) if i != dim]
    moved = tuple(shape[i] for i in order)
    new, source = [], w
    if order != list(range(len(shape))):
        new.append(Node(f"{name}_wperm", "permute.default", [w, order], {}, moved, dtype, False))
        new.append(Node(f"{name}_wdense", "clone.default", [new[-1].name], {}, moved, dtype))
        source = new[-1].name
    merged = (moved[0] * moved[1] if transposed else moved[0],) + \
        ((moved[2],) if transposed else (moved[1] * moved[2],)) + moved[3:]
    return new + [Node(f"{name}_w", "view.default", [source, list(merged)], {}, merged, dtype)]
