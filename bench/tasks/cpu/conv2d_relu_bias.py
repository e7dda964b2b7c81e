"""KernelBench level2/1 (Conv2d, ReLU, bias add) at a CPU's size: batch 8 and 64 x 64 instead of 128 and 128 x 128."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


def get_inputs():
    return [torch.rand(8, 64, 64, 64)]


def get_init_inputs():
    return [64, 128, 3, (128, 1, 1)]
