"""The mean over the output features of nn.Linear, the dim dropped: addmm's bias summed too
(kernelsmith/compiler/passes/gemm_reduce.py); `bash bench/device.sh gemm-reduce` times it."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x).mean(dim=1))


batch_size, in_features, out_features = 4096, 4096, 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
