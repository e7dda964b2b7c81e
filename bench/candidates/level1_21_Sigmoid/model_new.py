import torch
import torch.nn as nn

from kernelsmith.ext import load_kernels

ext = load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.sigmoid(x, 0)
