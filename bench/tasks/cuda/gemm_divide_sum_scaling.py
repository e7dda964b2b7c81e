"""KernelBench level2/14's pattern (Gemm_Divide_Sum_Scaling) at its sizes: the features of x W^T summed.
The built-in policy turns it into a GEMM against the summed weight (kernelsmith/compiler/passes/gemm_reduce.py);
`bash bench/device.sh gemm-reduce` times it against eager and torch.compile."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = torch.matmul(x, self.weight.T)
        x = x / 2
        x = torch.sum(x, dim=1, keepdim=True)
        return x * self.scaling_factor


batch_size, input_size, hidden_size, scaling_factor = 1024, 8192, 8192, 1.5


def get_inputs():
    return [torch.rand(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, scaling_factor]
