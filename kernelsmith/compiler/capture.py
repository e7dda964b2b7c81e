"""Capture a task's computation as a Graph: a flat list of core ATen nodes with shapes and dtypes.

torch.export traces Model on meta tensors built by the task's own get_inputs() and
get_init_inputs() (nothing is allocated, nothing else about the task is used), and
run_decompositions() lowers it to core ATen (decompositions.py), so `F.gelu`, `torch.sigmoid`
and `x.sigmoid()` all arrive as one op. Parameters and buffers keep their module paths, so
ModelNew (a subclass of Model) reaches them as `self.<path>`. Numbers forward makes as tensors
are inlined (passes/literals.py) and nodes no output needs are dropped (passes/dead_code.py).
"""

from __future__ import annotations

import keyword
import re
import threading
from pathlib import Path

import torch

from kernelsmith.compiler import recurrent, recurrent_ops
from kernelsmith.compiler.decompositions import decompositions
from kernelsmith.compiler.dtypes import AT_PRECISION, dtype_name
from kernelsmith.compiler.graph import CaptureError, Graph, Node, consumers_of
from kernelsmith.compiler.ir import Value
from kernelsmith.compiler.passes import constants, dead_code, literals
from kernelsmith.evaluation import sources

# torch.export keeps its tracing mode in process-wide state: two captures at once (the bench runs
# sessions on threads) fail with "ProxyTorchDispatchMode slot already occupied", and the task
# module is loaded under one name. One capture at a time.
_EXPORT_LOCK = threading.Lock()


def capture(task_path: Path, precision: str = "fp32") -> Graph:
    """The graph of Model at `precision`: in bf16 and fp16, Model and its floating inputs are cast
    to that dtype as the harness runs them, so every value of the graph has its real dtype."""
    with _EXPORT_LOCK:
        return _capture(task_path, precision)


def _capture(task_path: Path, precision: str) -> Graph:
    task = sources.load_source(task_path, "ks_builtin_task")
    sources.require(task, "Model", "get_inputs", "get_init_inputs")
    with torch.device("meta"):
        model, inputs = _at_precision(task.Model(*task.get_init_inputs()), tuple(task.get_inputs()), precision)
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
    _refuse_recurrent_modules(model)
    program = _export(model, traced)
    graph = _graph_of(program, len(inputs), _literal_values(program))
    for i in scalars:
        graph.inputs[i].scalar = True
    return graph


def _at_precision(model, inputs: tuple, precision: str):
    """Model and its inputs cast as the harness casts them (harness/loading.py): floating
    parameters, buffers and input tensors to the precision's dtype; fp32 and tf32 leave them."""
    dtype = AT_PRECISION.get(precision)
    if dtype is None:
        return model, inputs
    cast = lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
    return model.to(dtype), tuple(cast(x) for x in inputs)


def _export(model, traced: tuple):
    try:
        with _LiteralsOnCpu(), recurrent_ops.StandIns():
            exported = torch.export.export(model, traced)
    except Exception as err:  # export raises many kinds; all mean "cannot capture"
        raise _export_error(err) from None
    _refuse_recurrent(exported)
    try:
        return exported.run_decompositions(decompositions())
    except Exception as err:
        raise _export_error(err) from None


def _export_error(err: Exception) -> CaptureError:
    return CaptureError(f"torch.export could not capture Model: {type(err).__name__}: "
                        f"{str(err).splitlines()[0] if str(err) else ''}")


# Recurrent layers reach the export as one op. nn.LSTM and nn.GRU (aten.lstm.input, aten.gru.input) stay
# whole: the compiler has a recurrent group of its own (recurrent.py). The others, decomposed, would unroll
# every time step of every layer into nodes of their own (nn.LSTM over 512 steps and 6 layers: 64,590
# nodes, 100 s of decomposition on 2 cores, then a GEMM kernel per step); they are refused at once, by name.
RECURRENT = {"lstm": "nn.LSTM", "gru": "nn.GRU", "rnn_tanh": "nn.RNN", "rnn_relu": "nn.RNN",
             "lstm_cell": "nn.LSTMCell", "gru_cell": "nn.GRUCell", "rnn_tanh_cell": "nn.RNNCell",
             "rnn_relu_cell": "nn.RNNCell"}
KEPT_RECURRENT = ("lstm.input", "gru.input")  # the overloads the recurrent group takes (not .data: packed sequences)
UNROLLED = "is not supported yet: its decomposition unrolls every time step and layer into kernels of their own"


def _refuse_recurrent_modules(model: torch.nn.Module) -> None:
    """Before the export, which alone takes 10-50 s to trace a recurrent cell's steps on 2 cores."""
    for module in model.modules():
        kept = isinstance(module, (torch.nn.LSTM, torch.nn.GRU)) and not getattr(module, "proj_size", 0)
        if isinstance(module, (torch.nn.RNNBase, torch.nn.RNNCellBase)) and not kept:
            kind = type(module).__name__ + (" with proj_size" if isinstance(module, torch.nn.LSTM) else "")
            raise CaptureError(f"nn.{kind} {UNROLLED}")


def _refuse_recurrent(exported) -> None:
    """The same for recurrent ops forward calls without a module (torch._VF.rnn_tanh), and packed sequences."""
    for node in exported.graph.nodes:
        packet = getattr(node.target, "_overloadpacket", None)
        name = getattr(packet, "__name__", "") if getattr(node.target, "namespace", "") == "aten" else ""
        overload = f"{name}.{getattr(node.target, '_overloadname', '')}"
        if node.op == "call_function" and name in RECURRENT and overload not in KEPT_RECURRENT:
            raise CaptureError(f"{RECURRENT[name]} (aten.{overload}) {UNROLLED}")


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
    found = {}
    for placeholder, name in program.graph_signature.inputs_to_lifted_tensor_constants.items():
        value = program.constants.get(name)
        if isinstance(value, torch.Tensor):
            literals.require_number(value)
        if not isinstance(value, torch.Tensor) or value.device.type == "meta":
            raise CaptureError(f"the constant tensor {name!r} has no value when captured on meta tensors "
                               "(make it a buffer, or a Python number)")
        found[c_name(placeholder)] = value.item()
    return found


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
    return Value(c_name(node.name), tuple(int(s) for s in val.shape), dtype_name(val.dtype),
                 source=source, contiguous=val.is_contiguous())


def _graph_of(program, n_inputs: int, numbers: dict[str, float | int]) -> Graph:
    signature = program.graph_signature
    param_paths = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    inputs, params, nodes = [], [], []
    for node in program.graph.nodes:
        if node.op == "placeholder":
            if c_name(node.name) in numbers:
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
    nodes = recurrent.zero_states(literals.inline(nodes, numbers))
    if set(outputs) & set(numbers):
        raise CaptureError("forward returns a constant tensor it made; not supported")
    nodes, made, init = constants.hoist(nodes, outputs)
    graph = Graph(inputs, params + made, dead_code.live(nodes, outputs), outputs, returns_tuple=_returns_tuple(program),
                  init=init)
    graph.consumers = consumers_of(graph)
    return graph


def _user_outputs(program) -> list[str]:
    """What forward returns. Buffer updates (batch norm's running statistics in training mode)
    are left out: the harness compares forward's outputs, and ModelNew does not update them."""
    from torch.export.graph_signature import OutputKind

    return [c_name(spec.arg.name) for spec in program.graph_signature.output_specs
            if spec.kind == OutputKind.USER_OUTPUT]


def _returns_tuple(program) -> bool:
    spec = program.call_spec.out_spec
    return spec is not None and not spec.is_leaf()


def _node_of(node) -> Node:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)):  # multi-output ops (max.dim): described by their first result
        val = val[0]
    target = "getitem" if node.target.__name__ == "getitem" else str(node.target).removeprefix("aten.")
    target = recurrent_ops.ATEN.get(target, target)  # (the recurrent layers' stand-ins, as the aten ops)
    return Node(c_name(node.name), target, [_arg(a) for a in node.args],
                {k: _arg(v) for k, v in node.kwargs.items()}, tuple(int(s) for s in val.shape),
                dtype_name(val.dtype), val.is_contiguous())


def _arg(arg):
    if isinstance(arg, torch.fx.Node):
        return c_name(arg.name)
    if isinstance(arg, (list, tuple)):
        return [_arg(a) for a in arg]
    if isinstance(arg, torch.dtype):
        return dtype_name(arg)
    if isinstance(arg, (torch.device, torch.layout, torch.memory_format)):
        return str(arg)
    return arg
