"""Capture a task's computation as a flat list of core ATen nodes with shapes and dtypes.

torch.export traces Model on meta tensors built by the task's own get_inputs() and
get_init_inputs() (nothing is allocated, nothing else about the task is used), and
run_decompositions() lowers it to core ATen, so `F.gelu`, `torch.sigmoid` and `x.sigmoid()`
all arrive as one op. Parameters and buffers keep their module paths, so ModelNew (a
subclass of Model) reaches them as `self.<path>`.
"""

from __future__ import annotations

import keyword
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelsmith.compiler.ir import Value
from kernelsmith.evaluation import sources

DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
          torch.int64: "int64", torch.int32: "int32", torch.bool: "bool", torch.float64: "float64"}


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

    def values(self) -> dict[str, Value]:
        found = {v.name: v for v in self.inputs + self.params}
        found.update({n.name: Value(n.name, n.shape, n.dtype, contiguous=n.contiguous) for n in self.nodes})
        return found


# torch.export keeps its tracing mode in process-wide state: two captures at once (the bench runs
# sessions on threads) fail with "ProxyTorchDispatchMode slot already occupied", and the task
# module is loaded under one name. One capture at a time.
_EXPORT_LOCK = threading.Lock()


def capture(task_path: Path) -> Graph:
    with _EXPORT_LOCK:
        return _capture(task_path)


def _capture(task_path: Path) -> Graph:
    task = sources.load_source(task_path, "ks_builtin_task")
    sources.require(task, "Model", "get_inputs", "get_init_inputs")
    with torch.device("meta"):
        model = task.Model(*task.get_init_inputs())
        inputs = tuple(task.get_inputs())
    # No eval(): the harness runs Model as constructed (training mode, as KernelBench does),
    # so batch norm uses batch statistics and the captured graph must say so.
    if not all(isinstance(x, (torch.Tensor, float)) for x in inputs):
        kinds = ", ".join(type(x).__name__ for x in inputs)
        raise CaptureError(f"forward takes inputs other than tensors and floats ({kinds}); not supported yet")
    # A float input is traced as a 0-dim float32 tensor, so it stays a value of the graph (an
    # export would bake it in as a constant); the kernels then take it by value at run time.
    scalars = [i for i, x in enumerate(inputs) if isinstance(x, float)]
    traced = tuple(torch.empty((), dtype=torch.float32, device="meta") if i in scalars else x
                   for i, x in enumerate(inputs))
    try:
        with _LiteralsOnCpu():
            exported = torch.export.export(model, traced)
        program = exported.run_decompositions(_decompositions())
    except Exception as err:  # export raises many kinds; all mean "cannot capture"
        raise CaptureError(f"torch.export could not capture Model: {type(err).__name__}: "
                           f"{str(err).splitlines()[0] if str(err) else ''}") from None
    literals = _literal_values(program)
    graph = _graph_of(program, len(inputs), literals)
    for i in scalars:
        graph.inputs[i].scalar = True
    return graph


class _LiteralsOnCpu(torch.overrides.TorchFunctionMode):
    """Tensors forward makes from Python numbers (`torch.tensor(0.0, device=x.device)`,
    `as_tensor`, `x.new_tensor`) are made on the CPU while the capture traces on meta tensors,
    so that torch.export lifts them as constants that keep their values."""

    MAKERS = (torch.tensor, torch.as_tensor, torch.Tensor.new_tensor)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        data = args[1] if func is torch.Tensor.new_tensor and len(args) > 1 else args[0] if args else None
        if func in self.MAKERS and isinstance(data, (bool, int, float)):  # (only a 0-dim CPU tensor mixes with meta)
            kwargs = {**kwargs, "device": "cpu"}
        return func(*args, **kwargs)


def _literal_values(program) -> dict[str, float | int]:
    """The numbers of the constants torch.export lifted, by placeholder name. Only 0-dim ones
    are inlined; a constant made on meta tensors (a tensor attribute of Model) has no value."""
    literals = {}
    for placeholder, name in program.graph_signature.inputs_to_lifted_tensor_constants.items():
        value = program.constants.get(name)
        if isinstance(value, torch.Tensor):
            _require_number(value)
        if not isinstance(value, torch.Tensor) or value.device.type == "meta":
            raise CaptureError(f"the constant tensor {name!r} has no value when captured on meta tensors "
                               "(make it a buffer, or a Python number)")
        literals[c_name(placeholder)] = value.item()
    return literals


def _require_number(value: torch.Tensor) -> None:
    if value.dim() != 0 or value.dtype not in (torch.float32, torch.int64):
        raise CaptureError(f"forward makes a {DTYPES.get(value.dtype, value.dtype)} tensor of shape "
                           f"{list(value.shape)} from Python data; only 0-dim float32 or int64 numbers are supported")


# Ops the generators handle whole: decomposing them would only make more, smaller ops.
KEPT_WHOLE = ("softplus", "logsumexp", "mish", "silu", "hardswish", "hardsigmoid", "rsub", "square")


def _decompositions() -> dict:
    table = torch.export.default_decompositions()
    for op in list(table):
        if str(op).removeprefix("aten.").split(".")[0] in KEPT_WHOLE:
            del table[op]
    aten = torch.ops.aten
    table[aten._native_batch_norm_legit_functional.default] = _batch_norm_training
    table[aten._native_batch_norm_legit.no_stats] = _batch_norm_no_stats
    table[aten.native_group_norm.default] = _group_norm
    return table


# Normalisations in training mode as means the partitioner knows. Statistics over the batch
# and spatial dims (0, 2, 3, ...) are not one adjacent range, so they are taken in two steps:
# over the spatial dims, then over the batch (equal counts: the mean of means is the mean).

def _channel_mean(t):
    spatial = list(range(2, t.dim()))
    return (t.mean(spatial, keepdim=True) if spatial else t).mean(0, keepdim=True)


def _normalize(x, mean_of, eps):
    """(x - mean) * rsqrt(biased var + eps), with the mean and rstd, all by mean_of's grouping."""
    mean = mean_of(x)
    centered = x - mean
    var = mean_of(centered * centered)
    rstd = torch.rsqrt(var + eps)
    return centered * rstd, mean, var, rstd


def _channels(param, like):
    return param.view([1, -1] + [1] * (like.dim() - 2))


def _affine(y, weight, bias):
    y = y * _channels(weight, y) if weight is not None else y
    return y + _channels(bias, y) if bias is not None else y


def _batch_norm_training(x, weight, bias, running_mean, running_var, training, momentum, eps):
    y, mean, var, rstd = _normalize(x, _channel_mean, eps)
    count = x.numel() // x.shape[1]
    mean, var, rstd = mean.view(-1), var.view(-1), rstd.view(-1)
    new_mean = running_mean * (1 - momentum) + mean * momentum  # (buffer updates: dropped later)
    new_var = running_var * (1 - momentum) + var * (count / max(count - 1, 1)) * momentum
    return _affine(y, weight, bias), mean, rstd, new_mean, new_var


def _batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    y, mean, _var, rstd = _normalize(x, _channel_mean, eps)
    return _affine(y, weight, bias), mean.view(-1), rstd.view(-1)


def _group_norm(x, weight, bias, n, channels, hw, groups, eps):
    grouped = x.view(n, groups, -1)
    y, mean, _var, rstd = _normalize(grouped, lambda t: t.mean(2, keepdim=True), eps)
    return _affine(y.view(x.shape), weight, bias), mean.view(n, groups), rstd.view(n, groups)


def c_name(name: str) -> str:
    return re.sub(r"\W", "_", name)


def attribute_source(root: str, path: str) -> str:
    """Python that reaches a parameter or buffer by its module path: `self.lin.weight`, with
    getattr for parts that are not names (nn.Sequential's children are "0", "1", ...)."""
    expr = root
    for part in path.split("."):
        mangled = part.startswith("__") and not part.endswith("__")  # self.__w in a class body is self._C__w
        plain = part.isidentifier() and not keyword.iskeyword(part) and not mangled
        expr = f"{expr}.{part}" if plain else f"getattr({expr}, {part!r})"
    return expr


def _value_of(node, source: str = "") -> Value:
    val = node.meta["val"]
    return Value(c_name(node.name), tuple(int(s) for s in val.shape), DTYPES.get(val.dtype, str(val.dtype)),
                 source=source, contiguous=val.is_contiguous())


def _graph_of(program, n_inputs: int, literals: dict[str, float | int] | None = None) -> Graph:
    signature = program.graph_signature
    param_paths = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    literals = literals or {}
    inputs, params, nodes, outputs = [], [], [], []
    for node in program.graph.nodes:
        if node.op == "placeholder":
            if c_name(node.name) in literals:
                continue  # inlined into the nodes that read it
            if node.name in param_paths:
                params.append(_value_of(node, attribute_source("self", param_paths[node.name])))
            else:
                inputs.append(_value_of(node, f"x{len(inputs)}"))
        elif node.op == "call_function" and (node.users or node.meta.get("val") is not None):
            nodes.append(_node_of(node))  # (nodes with no value and no users are run-time asserts)
    if len(inputs) != n_inputs:
        raise CaptureError(f"the graph has {len(inputs)} tensor inputs, get_inputs() gives {n_inputs} "
                           "(non-tensor inputs are not supported yet)")
    outputs = _user_outputs(program)
    nodes = _inline_literals(nodes, literals)
    if set(outputs) & set(literals):
        raise CaptureError("forward returns a constant tensor it made; not supported")
    graph = Graph(inputs, params, _live(nodes, outputs), outputs, returns_tuple=_returns_tuple(program))
    graph.consumers = _consumers(graph)
    return graph


def _inline_literals(nodes: list[Node], literals: dict[str, float | int]) -> list[Node]:
    """Each literal's name in a node's arguments becomes its number, as if forward had written
    `torch.min(x, 0.0)`. Only pointwise ops may read one: a number means the same thing there."""
    from kernelsmith.compiler.lowering import kind_of

    kept = []
    for node in nodes:
        names = set(_reads(node))
        if not names & set(literals):
            kept.append(node)
            continue
        if kind_of(node) != "pointwise":
            raise CaptureError(f"a constant tensor made in forward feeds {node.target}; "
                               "only pointwise ops may read one")
        if names <= set(literals):  # clone(c), sqrt(c): a number too
            literals[node.name] = _fold(node, literals)
            continue
        node.args = _substitute(node.args, literals)
        node.kwargs = dict(zip(node.kwargs, _substitute(list(node.kwargs.values()), literals)))
        kept.append(node)
    return kept


def _fold(node: Node, literals: dict[str, float | int]) -> float | int:
    """A pointwise op over numbers only, computed once here with the ATen op the graph names."""
    op = torch.ops.aten
    for part in node.target.split("."):
        op = getattr(op, part)

    def tensor(value):
        return torch.tensor(value, dtype=torch.int64 if isinstance(value, int) else torch.float32)
    tensors = {name: tensor(literals[name]) for name in _reads(node)}
    kwargs = dict(zip(node.kwargs, _substitute(list(node.kwargs.values()), tensors)))
    result = op(*_substitute(node.args, tensors), **kwargs)
    _require_number(result)
    return result.item()


def _substitute(args: list, literals: dict) -> list:
    return [literals.get(a, a) if isinstance(a, str) else _substitute(a, literals) if isinstance(a, list) else a
            for a in args]


def _user_outputs(program) -> list[str]:
    """What forward returns. Buffer updates (batch norm's running statistics in training mode)
    are left out: the harness compares forward's outputs, and ModelNew does not update them."""
    from torch.export.graph_signature import OutputKind

    return [c_name(spec.arg.name) for spec in program.graph_signature.output_specs
            if spec.kind == OutputKind.USER_OUTPUT]


def _live(nodes: list[Node], outputs: list[str]) -> list[Node]:
    """The nodes that some output depends on (the buffer updates' own ops drop out)."""
    wanted = set(outputs)
    for node in reversed(nodes):
        if node.name in wanted:
            wanted.update(_reads(node))
    return [n for n in nodes if n.name in wanted]


def _returns_tuple(program) -> bool:
    spec = program.call_spec.out_spec
    return spec is not None and not spec.is_leaf()


def _node_of(node) -> Node:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):  # multi-output ops (max.dim): described by their first result
        val = val[0]
    target = "getitem" if node.target.__name__ == "getitem" else str(node.target).removeprefix("aten.")
    return Node(c_name(node.name), target, [_arg(a) for a in node.args],
                {k: _arg(v) for k, v in node.kwargs.items()}, tuple(int(s) for s in val.shape),
                DTYPES.get(val.dtype, str(val.dtype)), val.is_contiguous())


def _arg(arg):
    if isinstance(arg, torch.fx.Node):
        return c_name(arg.name)
    if isinstance(arg, (list, tuple)):
        return [_arg(a) for a in arg]
    if isinstance(arg, torch.dtype):
        return DTYPES.get(arg, str(arg))
    if isinstance(arg, (torch.device, torch.layout, torch.memory_format)):
        return str(arg)
    return arg


def _consumers(graph: Graph) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for node in graph.nodes:
        for name in _reads(node):
            found.setdefault(name, []).append(node.name)
    for name in graph.outputs:
        found.setdefault(name, []).append("output")
    return found


def _reads(node: Node) -> list[str]:
    """The value names among a node's arguments and keyword arguments."""
    return _names_in(node.args) + _names_in(list(node.kwargs.values()))


def _names_in(args) -> list[str]:
    names = []
    for a in args:
        if isinstance(a, str):
            names.append(a)
        elif isinstance(a, list):
            names += _names_in(a)
    return names
