"""An honest candidate whose kernel is a gcc-built C library loaded through ctypes (no
torch-extension build, so bench tests stay fast). LIBAXPB is replaced by the test."""

import ctypes

import torch
import torch.nn as nn

_lib = ctypes.CDLL("LIBAXPB")


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.axpb(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(self.bias.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                  ctypes.c_long(x.shape[0]), ctypes.c_long(x.shape[1]))
        return y
