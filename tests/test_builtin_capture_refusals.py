"""What the compiler's capture refuses at once, by name: the recurrent layers it has no group for, whose
decomposition unrolls every time step and layer (KernelBench's level3/36 LSTM: 64,590 nodes after 100 s of
decomposition on 2 cores). nn.LSTM and nn.GRU are captured whole (compiler/recurrent.py)."""

import pytest

from kernelsmith.compiler.pipeline import build_plan

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, x, h):
{forward}

def get_inputs():
    return [torch.rand(2, 64, 8), torch.rand(1, 2, 16)]

def get_init_inputs():
    return []
"""

LAYERS = {
    "nn.RNN": ("        self.rnn = nn.RNN(8, 16, batch_first=True)",
               "        return self.rnn(x, h)[0]"),
    "nn.GRUCell": ("        self.rnn = nn.GRUCell(8, 16)",
                   "        return self.rnn(x[:, 0], h[0])"),
    "nn.LSTM with proj_size": ("        self.rnn = nn.LSTM(8, 16, batch_first=True, proj_size=4)",
                               "        return self.rnn(x, (h[..., :4], h))[0]"),
    # no module: the op itself, with weights held as plain parameters
    "nn.RNN (aten.rnn_tanh.input)": (
        "        self.w = nn.ParameterList([nn.Parameter(torch.rand(16, 8)), nn.Parameter(torch.rand(16, 16))])",
        "        return torch.rnn_tanh(x, h, list(self.w), False, 1, 0.0, False, False, True)[0]"),
}

# refused before they had a group of their own; now one recurrent group each
KEPT = {
    "nn.LSTM": ("        self.rnn = nn.LSTM(8, 16, batch_first=True)",
                "        return self.rnn(x, (h, h))[0]"),
    "nn.GRU": ("        self.rnn = nn.GRU(8, 16, batch_first=True, bidirectional=True)",
               "        return self.rnn(x, torch.cat([h, h]))[0]"),
    "torch.gru": ("        self.w = nn.ParameterList([nn.Parameter(torch.rand(48, 8)), nn.Parameter(torch.rand(48, 16))])",
                  "        return torch.gru(x, h, list(self.w), False, 1, 0.0, False, False, True)[0]"),
}


@pytest.mark.parametrize("layer", LAYERS)
def test_a_recurrent_layer_is_refused_by_name_in_one_line(tmp_path, layer):
    init, forward = LAYERS[layer]
    path = tmp_path / "model.py"
    path.write_text(TASK.format(init=init, forward=forward))
    built = build_plan(path, "cuda", "fp32")
    assert len(built.unsupported) == 1 and "\n" not in built.unsupported[0], built.unsupported
    assert built.unsupported[0].startswith(f"{layer} is not supported yet"), built.unsupported


@pytest.mark.parametrize("layer", KEPT)
def test_lstm_and_gru_are_one_recurrent_kernel(tmp_path, layer):
    init, forward = KEPT[layer]
    path = tmp_path / "model.py"
    path.write_text(TASK.format(init=init, forward=forward))
    built = build_plan(path, "cpu", "fp32")
    assert not built.unsupported, built.unsupported
    assert [g.kind for g in built.plan.groups()][-1:] == ["recurrent"]  # (after nn.GRU's torch.cat of h)
