"""The decomposition table of the capture: core ATen, except the ops the generators handle whole,
and the normalisations in training mode (batch, instance and group norm) as the means the
partitioner plans: `(x - mean) * rsqrt(var + eps) * w + b` with the biased variance."""

from __future__ import annotations

import torch

# Ops the generators handle whole: decomposing them would only make more, smaller ops.
KEPT_WHOLE = ("softplus", "logsumexp", "mish", "silu", "hardswish", "hardsigmoid", "rsub", "square",
              # attention's softmax, 0 on rows that are all -inf: decomposed, a bool `any` stored between kernels
              "_safe_softmax")


def decompositions() -> dict:
    """torch.export's default table, less the ops kept whole, plus the normalisations below."""
    table = torch.export.default_decompositions()
    for op in list(table):
        if str(op).removeprefix("aten.").split(".")[0] in KEPT_WHOLE:
            del table[op]
    aten = torch.ops.aten
    table[aten._native_batch_norm_legit_functional.default] = _batch_norm_training
    table[aten._native_batch_norm_legit.no_stats] = _batch_norm_no_stats
    table[aten.native_group_norm.default] = _group_norm
    table[aten.native_layer_norm.default] = _layer_norm
    return table


# Normalisations in training mode as means the partitioner knows. Statistics over the batch
# and spatial dims (0, 2, 3, ...) are not one adjacent range, so they are taken in two steps:
# over the spatial dims, then over the batch (equal counts: the mean of means is the mean).

def _channel_mean(t):
    spatial = list(range(2, t.dim()))
    return (t.mean(spatial, keepdim=True) if spatial else t).mean(0, keepdim=True)


def _normalize(x, mean_of, eps):
    """(x - mean) * rsqrt(biased var + eps), with the mean and rstd, all by mean_of's grouping."""
    mean = mean_of(x)
    centered = x - mean
    var = mean_of(centered * centered)
    rstd = torch.rsqrt(var + eps)
    return centered * rstd, mean, var, rstd


def _channels(param, like):
    return param.view([1, -1] + [1] * (like.dim() - 2))


def _affine(y, weight, bias):
    y = y * _channels(weight, y) if weight is not None else y
    return y + _channels(bias, y) if bias is not None else y


def _batch_norm_training(x, weight, bias, running_mean, running_var, training, momentum, eps):
    y, mean, var, rstd = _normalize(x, _channel_mean, eps)
    count = x.numel() // x.shape[1]
    mean, var, rstd = mean.view(-1), var.view(-1), rstd.view(-1)
    new_mean = running_mean * (1 - momentum) + mean * momentum  # (buffer updates: dropped later)
    new_var = running_var * (1 - momentum) + var * (count / max(count - 1, 1)) * momentum
    return _affine(y, weight, bias), mean, rstd, new_mean, new_var


def _batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    y, mean, _var, rstd = _normalize(x, _channel_mean, eps)
    return _affine(y, weight, bias), mean.view(-1), rstd.view(-1)


def _group_norm(x, weight, bias, n, channels, hw, groups, eps):
    grouped = x.view(n, groups, -1)
    y, mean, _var, rstd = _normalize(grouped, lambda t: t.mean(2, keepdim=True), eps)
    return _affine(y.view(x.shape), weight, bias), mean.view(n, groups), rstd.view(n, groups)


def _layer_norm(x, normalized_shape, weight, bias, eps):
    """Statistics over the trailing normalized dims, one adjacent range (flattened into one for the means)."""
    axis = x.dim() - len(normalized_shape)
    rows = x.reshape(list(x.shape[:axis]) + [-1]) if len(normalized_shape) != 1 else x
    y, mean, _var, rstd = _normalize(rows, lambda t: t.mean(-1, keepdim=True), eps)
    y = y.view(x.shape)
    y = y * weight if weight is not None else y
    y = y + bias if bias is not None else y
    stats = list(x.shape[:axis]) + [1] * len(normalized_shape)
    return y, mean.view(stats), rstd.view(stats)
