"""KernelBench level2/13 (ConvTranspose3d_Mean_Add_Softmax_Tanh_Scaling) at sizes for the CPU: the mean over depth
of a padded stride-1 ConvTranspose3d. The built-in policy makes it a ConvTranspose2d over 3 times the input
channels (kernelsmith/compiler/passes/conv_reduce.py); docs/builtin.md has what it measured."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride, padding=padding)
        self.bias = nn.Parameter(torch.randn(1, out_channels, 1, 1, 1))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv_transpose(x)
        x = x.mean(dim=2, keepdim=True)
        x = x + self.bias
        x = torch.softmax(x, dim=1)
        x = torch.tanh(x)
        return x * self.scaling_factor


batch_size, in_channels, out_channels = 2, 16, 64
depth, height, width = 16, 32, 32
kernel_size, stride, padding, scaling_factor = 3, 1, 1, 2.0


def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, scaling_factor]
