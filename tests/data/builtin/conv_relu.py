"""A small convolution with its bias, ReLU and a scale: one cuDNN/direct convolution kernel
with the rest fused after it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels_in: int, channels_out: int):
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 0.5


def get_inputs():
    return [torch.randn(2, 4, 12, 12)]


def get_init_inputs():
    return [4, 8]
