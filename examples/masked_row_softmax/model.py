"""Masked row softmax with a temperature.

z = x / temperature, positions where mask is False set to -inf, then softmax
over the last dimension. x is [rows, N] float32, mask is [rows, N] bool; every
row keeps at least one unmasked position (column 0 is always kept). Eager
PyTorch runs a divide, a masked_fill and a softmax; a fused kernel reads x and
the mask once for an online max/sum and once more for the output.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z = (x / self.temperature).masked_fill(~mask, float("-inf"))
        return torch.softmax(z, dim=-1)


rows = 4096
n_cols = 2048
temperature = 0.5


def get_inputs():
    x = torch.randn(rows, n_cols)
    mask = torch.rand(rows, n_cols) > 0.2
    mask[:, 0] = True
    return [x, mask]


def get_init_inputs():
    return [temperature]
