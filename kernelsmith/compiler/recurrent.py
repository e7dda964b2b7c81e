"""Recurrent layers, nn.LSTM and nn.GRU, as one group of the kernel IR: `aten.lstm.input` and
`aten.gru.input` stay whole at capture (decompositions.py), and the partitioner makes each one a
RecurrentGroup, with the getitems that pick its results (output, h_n, c_n) as its values.

Both targets run it the same way (cuda/recurrent.py, cpu/recurrent.py): per layer and direction, the
input projection of every time step as one GEMM, x @ W_ih^T; then per time step the recurrent GEMM
h @ W_hh^T and one pointwise cell (the biases, the gates, c and h), which writes the step's h into the
layer's output sequence. The reverse direction walks the steps backwards; a layer's output sequence is
the next layer's input. Gate order is torch's: LSTM i, f, g, o; GRU r, z, n, with b_hn inside r * (...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelsmith.compiler.graph import Node
from kernelsmith.compiler.ir import Group, Value
from kernelsmith.compiler.lowering import RECURRENTS, Unsupported

GATES = {"lstm": 4, "gru": 3}
RESULTS = {"lstm": ("output", "h_n", "c_n"), "gru": ("output", "h_n")}
ROLES = RESULTS["lstm"]


@dataclass
class RecurrentGroup(Group):
    """A whole nn.LSTM / nn.GRU. x is [seq, batch, input] ([batch, seq, input] when batch_first); h0 (and
    LSTM's c0) [layers * directions, batch, hidden]. `weights[layer * directions + direction]` holds
    [w_ih, w_hh] and, with biases, [b_ih, b_hh]. `results` names the values of (output, h_n[, c_n]),
    "" where nothing reads one."""

    cell: str = "lstm"
    x: str = ""
    h0: str = ""
    c0: str = ""
    weights: list[list[str]] = field(default_factory=list)
    layers: int = 1
    directions: int = 1
    batch_first: bool = False
    seq: int = 0
    batch: int = 0
    input_size: int = 0
    hidden: int = 0
    results: list[str] = field(default_factory=list)

    kind = "recurrent"

    @property
    def gates(self) -> int:
        return GATES[self.cell]

    def named(self, role: str) -> str:
        """The value name of "output", "h_n" or "c_n" ("" when nothing reads it; a GRU has no c_n)."""
        return self.results[RESULTS[self.cell].index(role)] if role in RESULTS[self.cell] else ""

    def stored(self, role: str) -> str:
        """The output the kernel writes for `role`, or "" (a result nothing outside the group reads)."""
        name = self.named(role)
        return name if name and any(o.name == name for o in self.outputs) else ""

    def layer_input(self, layer: int) -> int:
        """The features a layer reads: the input's, then the previous layer's directions side by side."""
        return self.input_size if layer == 0 else self.directions * self.hidden


def recurrent_group(node: Node, values: dict[str, Value]) -> RecurrentGroup:
    """The group of an aten.lstm.input / aten.gru.input node; the partitioner names it and adds its inputs."""
    cell = RECURRENTS[node.target]
    x, hx, params, has_biases, layers, dropout, train, bidirectional, batch_first = node.args[:9]
    _check_node(node, values[x].shape, bool(dropout and train and layers > 1))
    group = RecurrentGroup("", [], [], cell=cell, x=x, layers=int(layers), directions=2 if bidirectional else 1,
                           batch_first=bool(batch_first), results=[""] * len(RESULTS[cell]))
    group.seq, group.batch, group.input_size = _sizes(values[x].shape, group.batch_first)
    group.hidden = values[params[1]].shape[0] // group.gates  # (W_hh is [gates * hidden, hidden])
    group.h0, group.c0 = _initial_states(cell, hx)
    group.weights = _weights_by_layer(group, list(params), bool(has_biases), values)
    return group


def _check_node(node: Node, x_shape: tuple[int, ...], dropout_between_layers: bool) -> None:
    if dropout_between_layers:
        raise Unsupported(f"{node.target} with dropout between layers in training mode")
    if len(x_shape) != 3:
        raise Unsupported(f"{node.target} of a {len(x_shape)}-d input")


def _sizes(x_shape: tuple[int, ...], batch_first: bool) -> tuple[int, int, int]:
    """(seq, batch, input features) of x."""
    return (x_shape[1], x_shape[0], x_shape[2]) if batch_first else tuple(x_shape)


def _initial_states(cell: str, hx) -> tuple[str, str]:
    """(h0, c0) value names; "" for a state the layer starts from zeros (zero_states) or has not (a GRU's c0)."""
    h0, c0 = (list(hx) + [None])[:2] if cell == "lstm" else (hx, None)
    return h0 or "", c0 or ""


def _weights_by_layer(group: RecurrentGroup, params: list[str], has_biases: bool,
                      values: dict[str, Value]) -> list[list[str]]:
    """The flat parameter list cut per layer and direction, each checked against the shapes it must have."""
    per = 4 if has_biases else 2
    if len(params) != group.layers * group.directions * per:
        raise Unsupported(f"{group.cell} with {len(params)} weights (an LSTM with proj_size is not supported yet)")
    cut = [params[i:i + per] for i in range(0, len(params), per)]
    for index, weights in enumerate(cut):
        _check_weights(group, index // group.directions, [values[w].shape for w in weights])
    return cut


def _check_weights(group: RecurrentGroup, layer: int, shapes: list[tuple[int, ...]]) -> None:
    rows = group.gates * group.hidden
    wanted = [(rows, group.layer_input(layer)), (rows, group.hidden)] + [(rows,)] * (len(shapes) - 2)
    if [tuple(s) for s in shapes] != wanted:
        raise Unsupported(f"{group.cell} layer {layer} with weights of shapes {shapes} (wanted {wanted})")


def zero_states(nodes: list[Node]) -> list[Node]:
    """An initial state forward makes as zeros (nn.LSTM and nn.GRU called without hx) becomes None in the
    layer's node: the kernels start from zeros of their own, and the zeros, read by nothing else, are dead code."""
    zeros = {n.name for n in nodes if n.target == "full.default" and n.args[1] == 0}
    for node in nodes:
        if node.target in RECURRENTS:
            hx = node.args[1]
            node.args[1] = [None if h in zeros else h for h in hx] if isinstance(hx, list) else \
                (None if hx in zeros else hx)
    return nodes


def picked(group: RecurrentGroup, getitem: Node) -> None:
    """A getitem of the layer's results: it names that result."""
    group.results[int(getitem.args[1])] = getitem.name


def tensors(group: RecurrentGroup) -> list[str]:
    """Every tensor the group reads, in binding order: x, h0, c0, then the weights layer by layer."""
    return [n for n in (group.x, group.h0, group.c0) if n] + [w for ws in group.weights for w in ws]
