"""Recurrent groups (nn.LSTM, nn.GRU): text/recurrent.h runs the layer stack (the input projection of all
steps as one GEMM per layer and direction, then per step the recurrent GEMM and the cell); the kernel
generated here only names the sizes, the weights in layer order and where each result goes."""

from __future__ import annotations

from kernelsmith.compiler import text
from kernelsmith.compiler.cpu.common import dispatched
from kernelsmith.compiler.recurrent import ROLES, RecurrentGroup

VARIANTS = [("large GEMMs and cells across threads (omp), small ones on one", "true"), ("one thread", "false")]


def recurrent(group: RecurrentGroup) -> tuple[str, list[str]]:
    """The kernel's C++ and the names of its variants."""
    _check(group)
    bodies = [_body(group, threaded) for _, threaded in VARIANTS]
    kernel = text.fixed(__package__, "recurrent.h") + "\n" + dispatched(group, bodies)
    return kernel, [name for name, _ in VARIANTS]


def _check(group: RecurrentGroup) -> None:
    wrong = [v for v in group.inputs + group.outputs if v.dtype != "float32"]
    if wrong:
        raise ValueError(f"{group.name}: {wrong[0].name} is {wrong[0].dtype}; recurrent layers are generated in "
                         "float32 only")


def _body(group: RecurrentGroup, threaded: str) -> str:
    index = {v.name: i for i, v in enumerate(group.inputs)}
    weights = ", ".join(f"in{index[w]}" for layer in group.weights for w in layer)
    pointers = [f"in{index[n]}" if n else "nullptr" for n in (group.x, group.h0, group.c0)]
    return "\n".join([f"  {_sizes(group, threaded)}", f"  const float* weights[] = {{{weights}}};",
                      f"  ks_rnn_run(s, {', '.join(pointers)}, weights, {', '.join(_results(group))});"])


def _sizes(group: RecurrentGroup, threaded: str) -> str:
    flags = [group.batch_first, group.cell == "lstm", len(group.weights[0]) == 4]
    sizes = [group.seq, group.batch, group.input_size, group.hidden, group.layers, group.directions, group.gates]
    return (f"const KsRnn s{{{', '.join(f'{n}LL' for n in sizes)}, "
            f"{', '.join('true' if f else 'false' for f in flags)}, {threaded}}};")


def _results(group: RecurrentGroup) -> list[str]:
    """Where output, h_n and c_n go: the group's outputs, nullptr for one it does not write."""
    out = {o.name: f"out{j}" for j, o in enumerate(group.outputs)}
    return [out[group.stored(role)] if group.stored(role) else "nullptr" for role in ROLES]
