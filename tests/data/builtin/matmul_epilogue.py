"""Linear, then ReLU and a scale: a GEMM with its pointwise epilogue fused."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x)) * 2.0


def get_inputs():
    return [torch.randn(32, 128)]


def get_init_inputs():
    return [128, 64]
