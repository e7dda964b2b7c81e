import torch.nn as nn

from kernelsmith.ext import load_kernels

ext = load_kernels()


class ModelNew(nn.Module):
    def forward(self, x, w):
        return ext.gemm(x, w)
