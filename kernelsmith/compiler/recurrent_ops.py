"""What the capture traces in place of torch.lstm and torch.gru: `kernelsmith::lstm` and `kernelsmith::gru`,
custom ops with the signatures of aten.lstm.input and aten.gru.input whose fake kernels only compute the
result shapes. aten's own are composite: every fake pass over them (torch.export's trace, then
run_decompositions) walks all time steps of all layers, 20 s for level3/36's 6 layers of 512 steps.
The graph names these nodes as the aten ops they stand for (ATEN), so the rest of the compiler sees
aten.lstm.input and aten.gru.input, kept whole (decompositions.py)."""

from __future__ import annotations

import torch
from torch import Tensor

ATEN = {"kernelsmith.lstm.default": "lstm.input", "kernelsmith.gru.default": "gru.input"}


@torch.library.custom_op("kernelsmith::lstm", mutates_args=())
def lstm(input: Tensor, hx: list[Tensor], params: list[Tensor], has_biases: bool, num_layers: int, dropout: float,
         train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    out = torch.lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return tuple(t.clone() for t in out)


@torch.library.custom_op("kernelsmith::gru", mutates_args=())
def gru(input: Tensor, hx: Tensor, params: list[Tensor], has_biases: bool, num_layers: int, dropout: float,
        train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor]:
    out = torch.gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return tuple(t.clone() for t in out)


def _output(input: Tensor, hx: Tensor, bidirectional: bool) -> Tensor:
    """[seq, batch, directions * hidden] (batch and seq in the input's order)."""
    return input.new_empty((*input.shape[:-1], (2 if bidirectional else 1) * hx.shape[-1]))


@lstm.register_fake
def _lstm_shapes(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _output(input, hx[0], bidirectional), hx[0].new_empty(hx[0].shape), hx[1].new_empty(hx[1].shape)


@gru.register_fake
def _gru_shapes(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return _output(input, hx, bidirectional), hx.new_empty(hx.shape)


STAND_INS = {torch.lstm: lstm, torch.gru: gru}


def stand_in(func, args: tuple):
    """The custom op to trace for a call of `func`, or None: only the full-sequence form of each op (an
    LSTM's hx is a list, a GRU's a tensor; packed sequences and cells are left to aten)."""
    op = STAND_INS.get(func)
    if op is None or len(args) != 9 or not isinstance(args[2], (list, tuple)):
        return None
    return op if (op is lstm) == isinstance(args[1], (list, tuple)) else None


class StandIns(torch.overrides.TorchFunctionMode):
    """While torch.export traces forward: torch.lstm and torch.gru (what nn.LSTM and nn.GRU call) run as
    their stand-ins."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        op = stand_in(func, args)
        if op is not None and not kwargs:
            return op(args[0], list(args[1]) if op is lstm else args[1], list(args[2]), *args[3:])
        return func(*args, **(kwargs or {}))
