import torch
import torch.nn as nn
from kernelsmith.ext import load_kernels

ext = load_kernels()  # kernels/ next to this file, built (cached) and imported


class ModelNew(nn.Module):
    def __init__(self, n_features: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.rms_norm_rows(x, self.weight, self.eps, 0)
