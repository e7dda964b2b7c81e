import torch
import torch.nn as nn
from kernelsmith.ext import load_kernels

ext = load_kernels()  # kernels/ next to this file, built (cached) and imported


class ModelNew(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return ext.masked_row_softmax(x, mask, self.temperature, 0)
