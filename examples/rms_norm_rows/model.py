"""Row reduction: RMSNorm over the last dimension with a learnable weight.

y = x * rsqrt(mean(x^2, -1) + eps) * weight, x is [rows, N], weight is [N].
Eager PyTorch launches a pow, a mean, an add, an rsqrt and two multiplies; a
fused kernel reads each row once for the sum of squares and once (from cache)
for the scaling.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_features: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(n_features) + 0.5)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


rows = 4096
n_features = 2048
eps = 1e-6


def get_inputs():
    # Rows with different scales, so the normalisation actually matters.
    return [torch.randn(rows, n_features) * (torch.rand(rows, 1) * 4.0 + 0.25)]


def get_init_inputs():
    return [n_features, eps]
