"""From core ATen nodes to the compiler's vocabulary: which nodes are pointwise ops, reductions,
GEMMs, convolutions, pooling, concatenations or views, and their arguments in IR terms. The
partitioner decides what fuses."""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelsmith.compiler.dtypes import FLOATS
from kernelsmith.compiler.graph import Node
from kernelsmith.compiler.ir import FULL_SHAPE_REDUCTIONS, Op, View


class Unsupported(Exception):
    """A node the generators cannot handle yet; the message names it."""


UNARY = {"neg", "relu", "sigmoid", "tanh", "exp", "log", "log1p", "expm1", "abs", "sqrt", "rsqrt",
         "reciprocal", "sin", "cos", "erf", "floor", "ceil", "sign", "silu", "mish", "hardsigmoid", "square",
         "hardswish"}
BINARY = {"mul", "div", "maximum", "minimum"}
COPIES = {"clone.default", "alias.default", "detach.default", "lift_fresh_copy.default"}
VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "permute", "t", "transpose",
         "expand", "slice", "select"}
GEMMS = {"addmm", "mm", "bmm"}
CONVOLUTIONS = {"convolution"}
CATS = {"cat"}
POOLS = {"max_pool", "avg_pool2d", "avg_pool3d"}  # max_pool: max_poolNd_with_indices's values, folded
REDUCTION_TARGETS = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "argmax": "argmax",
                     "argmin": "argmin", "_softmax": "softmax", "_safe_softmax": "safe_softmax", "_log_softmax": "log_softmax",
                     "logsumexp": "logsumexp", "linalg_vector_norm": "norm2", "cumsum": "cumsum",
                     "welford": "welford"}  # welford: var_mean's mean, folded (passes/multi_output.py)
VARIANCES = {"welford_variance"}  # var_mean's variance: the welford reduction's second result
RECURRENTS = {"lstm.input": "lstm", "gru.input": "gru"}  # nn.LSTM, nn.GRU whole (recurrent.py)


def base(target: str) -> str:
    return target.split(".")[0]


def kind_of(node: Node) -> str:
    name = base(node.target)
    if node.target in COPIES or name in UNARY | BINARY or name in _SPECIAL_POINTWISE:
        return "pointwise"
    if name in REDUCTION_TARGETS:
        return "reduction"
    if name in VARIANCES:
        return "variance"
    if node.target in RECURRENTS:
        return "recurrent"
    if node.target == "getitem":  # a result of a multi-result op no pass folded (a recurrent layer's)
        return "getitem"
    if name in GEMMS:
        return "gemm"
    if name in CONVOLUTIONS:
        return "conv"
    if name in POOLS:
        return "pool"
    if name in CATS:
        return "cat"
    if name in VIEWS:
        return "view"
    return "unsupported"


def pointwise_op(node: Node) -> Op:
    """The IR op of a pointwise node (scalars inline, attrs from the node's arguments)."""
    name, args = base(node.target), list(node.args)
    if node.target in COPIES:
        return Op("copy", args[:1], node.name)
    if name in UNARY:
        return Op(name, args[:1], node.name)
    if name in BINARY:
        _check_rounding(node)
        return Op(name, args[:2], node.name)
    return _SPECIAL_POINTWISE[name](node, args)


def _check_rounding(node: Node) -> None:
    if node.kwargs.get("rounding_mode") is not None:
        raise Unsupported(f"{node.target} with rounding_mode={node.kwargs['rounding_mode']!r}")


def _add_like(name):
    def make(node, args):
        alpha = node.kwargs.get("alpha", args[2] if len(args) > 2 else 1.0)
        return Op(name, args[:2], node.name, {"alpha": float(alpha)})
    return make


def _pow(node, args):
    base_arg, exponent = args[0], args[1]
    if node.target == "pow.Tensor_Scalar":
        if exponent == 2:
            return Op("square", [base_arg], node.name)
        if exponent == 0.5:
            return Op("sqrt", [base_arg], node.name)
        return Op("pow_scalar", [base_arg], node.name, {"exponent": float(exponent)})
    if node.target == "pow.Scalar":
        raise Unsupported("pow with a scalar base")
    return Op("pow", args[:2], node.name)


def _gelu(node, args):
    approximate = node.kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    return Op("gelu_tanh" if approximate == "tanh" else "gelu", args[:1], node.name)


def _clamp(node, args):
    lo = node.kwargs.get("min", args[1] if len(args) > 1 else None)
    hi = node.kwargs.get("max", args[2] if len(args) > 2 else None)
    if isinstance(lo, str) or isinstance(hi, str):
        raise Unsupported("clamp with tensor bounds")
    if lo is not None and hi is not None:
        return Op("clamp", args[:1], node.name, {"min": float(lo), "max": float(hi)})
    if lo is not None:
        return Op("clamp_min", args[:1], node.name, {"min": float(lo)})
    if hi is not None:
        return Op("clamp_max", args[:1], node.name, {"max": float(hi)})
    return Op("copy", args[:1], node.name)


BOOL_RESULTS = {"logical_not", "eq", "ne", "gt", "ge", "lt", "le"}  # ops whose result is a bool tensor


def _bool_not(node: Node, args: list) -> Op:
    if node.dtype != "bool":
        raise Unsupported(f"{node.target} of {node.dtype} (bitwise, not logical)")
    return Op("logical_not", args[:1], node.name)


def _conversion(node: Node, args: list) -> Op:
    """`x.to(dtype)` between float dtypes: a copy, since kernels load every float into float math and
    round only when they store (the partitioner refuses other dtypes)."""
    moves = {k: v for k, v in node.kwargs.items() if k not in ("dtype", "layout", "device", "memory_format")}
    if moves or node.kwargs.get("memory_format") not in (None, "torch.preserve_format", "torch.contiguous_format"):
        raise Unsupported(f"{node.target} with {dict(node.kwargs)}")
    return Op("copy", args[:1], node.name)


def _clamp_one(field):
    def make(node, args):
        return Op(f"clamp_{field}", args[:1], node.name, {field: float(args[1])})
    return make


def _positional(name, fields, defaults):
    def make(node, args):
        values = {f: node.kwargs.get(f, args[i + 1] if len(args) > i + 1 else defaults[i])
                  for i, f in enumerate(fields)}
        return Op(name, args[:1], node.name, {k: float(v) for k, v in values.items()})
    return make


_SPECIAL_POINTWISE = {
    "add": _add_like("add"), "sub": _add_like("sub"), "rsub": _add_like("rsub"),
    "pow": _pow, "gelu": _gelu, "clamp": _clamp, "clamp_min": _clamp_one("min"), "clamp_max": _clamp_one("max"),
    "leaky_relu": _positional("leaky_relu", ["negative_slope"], [0.01]),
    "hardtanh": _positional("hardtanh", ["min", "max"], [-1.0, 1.0]),
    "softplus": _positional("softplus", ["beta", "threshold"], [1.0, 20.0]),
    "elu": _positional("elu", ["alpha", "scale", "input_scale"], [1.0, 1.0, 1.0]),
    "where": lambda node, args: Op("where", args[:3], node.name),
    "_to_copy": lambda node, args: _conversion(node, args),
    # bool results, 0.0 or 1.0 inside a kernel: a mask's negation, a comparison feeding `where`
    "logical_not": lambda node, args: Op("logical_not", args[:1], node.name),
    "bitwise_not": lambda node, args: _bool_not(node, args),
    **{name: (lambda op: lambda node, args: Op(op, args[:2], node.name))(name) for name in ("eq", "ne", "gt", "ge", "lt", "le")},
    # not ATen: batch norm's (x - mean) / sqrt(var + eps), made by passes/batch_norm.py
    "bn_scale": lambda node, args: Op("bn_scale", args[:2], node.name, {"eps": node.kwargs["eps"]}),
}


@dataclass
class ReductionSpec:
    reduce: str
    operand: str
    dims: tuple[int, ...]  # sorted, non-negative, a contiguous range
    keepdim: bool
    attrs: dict = field(default_factory=dict)  # welford: {"correction": ...}


def reduction_spec(node: Node, rank: int) -> ReductionSpec:
    reduce, args = REDUCTION_TARGETS[base(node.target)], list(node.args)
    if node.kwargs.get("dtype") not in (None, *FLOATS):  # (accumulated in float, stored at the result's dtype)
        raise Unsupported(f"{node.target} with dtype={node.kwargs['dtype']}")
    if reduce in FULL_SHAPE_REDUCTIONS:  # one dim, the result at the operand's shape
        return ReductionSpec(reduce, args[0], _dims([args[1]], rank), False)
    if reduce == "norm2":
        order = node.kwargs.get("ord", args[1] if len(args) > 1 else 2)
        if order != 2:
            raise Unsupported(f"vector norm of order {order}")
        dims, keep = node.kwargs.get("dim", args[2] if len(args) > 2 else None), \
            node.kwargs.get("keepdim", args[3] if len(args) > 3 else False)
    elif reduce in ("argmax", "argmin"):
        dim = node.kwargs.get("dim", args[1] if len(args) > 1 else None)
        dims, keep = (None if dim is None else [dim]), node.kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    else:
        dims = node.kwargs.get("dim", args[1] if len(args) > 1 else None)
        keep = node.kwargs.get("keepdim", args[2] if len(args) > 2 else False)
    attrs = _welford_attrs(node) if reduce == "welford" else {}
    return ReductionSpec(reduce, args[0], _dims(dims, rank), bool(keep), attrs)


def _welford_attrs(node: Node) -> dict:
    """var_mean's correction (torch's default: 1, Bessel's)."""
    correction = node.kwargs.get("correction")
    return {"correction": 1.0 if correction is None else float(correction)}


def _dims(dims, rank: int) -> tuple[int, ...]:
    if dims is None or dims == []:
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    found = tuple(sorted({d % rank for d in dims}))
    if found != tuple(range(found[0], found[-1] + 1)):
        raise Unsupported(f"a reduction over non-adjacent dims {list(dims)}")
    return found


VIEW_ARITY = {"t": 0, "transpose": 2, "unsqueeze": 1, "select": 2}  # the arguments after the tensor


def view_of(node: Node) -> View:
    """The view a view node takes, as data (ModelNew writes it, layout.py replays it)."""
    name, args = base(node.target), list(node.args)
    if name in ("view", "_unsafe_view", "reshape", "expand", "squeeze"):
        return View("expand" if name == "expand" else "view", tuple(int(s) for s in node.shape))
    if name == "permute":
        return View("permute", tuple(args[1]))
    if name in VIEW_ARITY:
        return View(name, tuple(args[1:1 + VIEW_ARITY[name]]))
    return _narrow(node, args)


def _narrow(node: Node, args: list) -> View:
    """slice(x, dim, start, end, step) as narrow(dim, start, length)."""
    dim = args[1] if len(args) > 1 else 0
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    step = args[4] if len(args) > 4 else 1
    if step != 1:
        raise Unsupported("a strided slice")
    return View("narrow", (dim, start, node.shape[dim]))
