import torch.nn as nn

from model import Model


class ModelNew(Model):
    def forward(self, x):
        return x * 3.0  # torch compute in forward: the harness rejects this
