import torch
import torch.nn as nn
from kernelsmith.ext import load_kernels

ext = load_kernels()  # kernels/ next to this file, built (cached) and imported


class ModelNew(nn.Module):
    def __init__(self, n_features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n_features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.bias_gelu_scale(x, self.bias, self.scale, 0)
