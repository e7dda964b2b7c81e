"""Tensors forward makes from no input: the causal mask `torch.ones(n, n, dtype=torch.bool).triu(1)` (which
exports as full, two aranges, sub, ge and logical_and), `torch.arange(n)`, a `torch.full` of a shape. They
depend on nothing the harness varies, so ModelNew makes them once, in its constructor, with the same ATen
ops the graph names, and keeps each one forward's kernels read as a non-persistent buffer (moved to the
device with the module, never in its state_dict). The kernels then read it as they read a parameter.

A random tensor made in forward (randn) is no constant: it is never hoisted, and stays refused."""

from __future__ import annotations

from kernelsmith.compiler.graph import CaptureError, Node, reads
from kernelsmith.compiler.ir import Value

MAKERS = {"full.default", "arange.default", "arange.start", "arange.start_step", "scalar_tensor.default"}
DROPPED_KWARGS = ("device", "layout", "pin_memory")  # the constructor makes them on the CPU; .to() moves them
PREFIX = "_ks_const_"  # the buffers' attribute names on ModelNew
RANDOM = ("rand", "bernoulli", "normal", "uniform", "dropout", "multinomial", "exponential", "poisson")


def hoist(nodes: list[Node], outputs: list[str]) -> tuple[list[Node], list[Value], list[str]]:
    """(the nodes forward still runs, the constants they read as parameters, the constructor's Python lines
    that make those constants)."""
    constant = _constant_nodes(nodes)
    if constant & set(outputs):
        raise CaptureError("forward returns a constant tensor it made; not supported")
    read = {name for n in nodes if n.name not in constant for name in reads(n)} | set(outputs)
    kept = [n for n in nodes if n.name not in constant]
    buffers = [n for n in nodes if n.name in constant and n.name in read]
    lines = [_line(n) for n in nodes if n.name in constant] + [_register(n) for n in buffers]
    params = [Value(n.name, n.shape, n.dtype, source=f"self.{PREFIX}{n.name}") for n in buffers]
    return kept, params, lines if buffers else []


def _constant_nodes(nodes: list[Node]) -> set[str]:
    """A maker, or any op whose every read is a constant (a graph is in topological order)."""
    found: set[str] = set()
    for node in nodes:
        names = reads(node)
        if node.target == "getitem" or any(word in node.target for word in RANDOM):
            continue  # (a getitem is Python's, not an ATen op the constructor could call)
        if node.target in MAKERS and not names or names and set(names) <= found:
            found.add(node.name)
    return found


def _line(node: Node) -> str:
    """`c_<name> = torch.ops.aten.<target>(...)`, its arguments as the graph holds them."""
    args = ", ".join(_python(a) for a in node.args)
    kwargs = "".join(f", {k}={_python(v, k)}" for k, v in node.kwargs.items() if k not in DROPPED_KWARGS)
    return f"c_{node.name} = torch.ops.aten.{node.target}({args}{kwargs})".replace("(, ", "(")


def _register(node: Node) -> str:
    return f"self.register_buffer({PREFIX + node.name!r}, c_{node.name}.contiguous(), persistent=False)"


def _python(arg, key: str = "") -> str:
    """An argument as Python: a value name is its local, a dtype name torch's dtype."""
    if isinstance(arg, list):
        return "[" + ", ".join(_python(a) for a in arg) + "]"
    if isinstance(arg, str) and "." in arg:  # torch.strided, torch.contiguous_format, torch.uint8
        return arg
    if isinstance(arg, str):
        return f"torch.{arg}" if key == "dtype" else f"c_{arg}"
    if isinstance(arg, float) and arg != arg or arg in (float("inf"), float("-inf")):
        return f"float({str(arg)!r})"
    return repr(arg)
