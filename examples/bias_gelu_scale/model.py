"""Pointwise fusion: y = gelu(x + bias) * scale, with the exact (erf) GELU.

x is [B, N]; bias is a learnable [N] vector broadcast over the rows; scale is a
plain float. Eager PyTorch runs this as three kernels (add, gelu, mul), each a
full pass over memory; a fused kernel does one read and one write.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, n_features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n_features) * 0.5)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + self.bias, approximate="none") * self.scale


batch_size = 4096
n_features = 2048
scale = 1.7


def get_inputs():
    return [torch.randn(batch_size, n_features) * 2.0]


def get_init_inputs():
    return [n_features, scale]
