import torch.nn as nn  # noqa: F401

from kernelsmith.ext import load_kernels
from model import Model

ext = load_kernels()


class ModelNew(Model):
    def forward(self, x):
        return ext.triple(x)
