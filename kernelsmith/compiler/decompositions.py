"""The decomposition table of the capture: core ATen, except the ops the generators handle whole,
and the normalisations (layer norm, and batch, instance and group norm in training mode) as the
statistics the partitioner plans: `(x - mean) * rsqrt(var + eps) * w + b` with the biased variance,
the mean and variance taken together by `var_mean` (one pass: a welford reduction)."""

from __future__ import annotations

import torch

# Ops the generators handle whole: decomposing them would only make more, smaller ops.
KEPT_WHOLE = ("softplus", "logsumexp", "mish", "silu", "hardswish", "hardsigmoid", "rsub", "square",
              # attention's softmax, 0 on rows that are all -inf: decomposed, a bool `any` stored between kernels
              "_safe_softmax",
              # nn.LSTM and nn.GRU: one recurrent group (recurrent.py); decomposed, every step of every layer
              # is nodes of its own (64,590 for a 6-layer LSTM over 512 steps, 100 s to decompose)
              "lstm", "gru")


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
    table[aten.repeat.default] = _repeat
    return table


def _repeat(x, repeats):
    """x.repeat(repeats) as a broadcast and a copy: each dim of x after a dim of its repeat count, expanded and
    made contiguous, then viewed as the repeated shape (nn.InstanceNorm2d(affine=True) repeats its weight and
    bias per sample; `repeat` itself was refused)."""
    shape = [1] * (len(repeats) - x.dim()) + list(x.shape)
    interleaved = x.reshape([d for size in shape for d in (1, size)])
    expanded = interleaved.expand([d for count, size in zip(repeats, shape) for d in (count, size)])
    return expanded.clone(memory_format=torch.contiguous_format).view([c * s for c, s in zip(repeats, shape)])


# Normalisations as statistics the partitioner knows: var_mean, which torch.export keeps whole and
# passes/multi_output.py folds into one welford reduction (mean and variance in one pass over x).
# Statistics over the batch and spatial dims (0, 2, 3, ...) are not one adjacent range, so they are
# taken in two steps: over the spatial dims, then over the batch (equal counts: the mean of the
# means is the mean, and the variance is the mean of the variances plus the variance of the means).

def _moments(t, dims):
    """(biased variance, mean) over dims, kept as dims of size 1."""
    return torch.var_mean(t, dims, correction=0, keepdim=True)


def _channel_moments(t):
    spatial = list(range(2, t.dim()))
    if not spatial or t.shape[0] == 1:  # one adjacent range (instance norm is a batch norm of one sample)
        return _moments(t, spatial or [0])
    var_within, means = _moments(t, spatial)
    var_between, mean = _moments(means, [0])
    return var_within.mean(0, keepdim=True) + var_between, mean


def _normalize(x, moments_of, eps):
    """(x - mean) * rsqrt(biased var + eps), with the mean, var and rstd, all by moments_of's grouping.
    rstd comes before x - mean, so it joins the statistics' kernel as its reduced-shape epilogue."""
    var, mean = moments_of(x)
    rstd = torch.rsqrt(var + eps)
    return (x - mean) * rstd, mean, var, rstd


def _channels(param, like):
    return param.view([1, -1] + [1] * (like.dim() - 2))


def _affine(y, weight, bias, channels=_channels):
    """y * w + b with the per-channel parameters viewed by `channels` to broadcast over y."""
    y = y * channels(weight, y) if weight is not None else y
    return y + channels(bias, y) if bias is not None else y


def _batch_norm_training(x, weight, bias, running_mean, running_var, training, momentum, eps):
    y, mean, var, rstd = _normalize(x, _channel_moments, eps)
    count = x.numel() // x.shape[1]
    mean, var, rstd = mean.view(-1), var.view(-1), rstd.view(-1)
    new_mean = running_mean * (1 - momentum) + mean * momentum  # (buffer updates: dropped later)
    new_var = running_var * (1 - momentum) + var * (count / max(count - 1, 1)) * momentum
    return _affine(y, weight, bias), mean, rstd, new_mean, new_var


def _batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    y, mean, _var, rstd = _normalize(x, _channel_moments, eps)
    return _affine(y, weight, bias), mean.view(-1), rstd.view(-1)


def _group_norm(x, weight, bias, n, channels, hw, groups, eps):
    """Statistics per (sample, group) over x viewed as [n, groups, channels per group, hw]: two adjacent
    dims, and the per-channel affine broadcasts in that view too, so the whole norm is one kernel."""
    grouped = x.view(n, groups, channels // groups, hw)
    y, mean, _var, rstd = _normalize(grouped, lambda t: _moments(t, [2, 3]), eps)
    y = _affine(y, weight, bias, lambda param, _y: param.view(1, groups, -1, 1))
    return y.view(x.shape), mean.view(n, groups), rstd.view(n, groups)


def _layer_norm(x, normalized_shape, weight, bias, eps):
    """Statistics over the trailing normalized dims, one adjacent range: several are flattened into one (a
    view), and the affine runs on those rows, so it joins the statistics' kernel as its last pass."""
    axis = x.dim() - len(normalized_shape)
    flat = len(normalized_shape) != 1
    rows = x.reshape(list(x.shape[:axis]) + [-1]) if flat else x
    y, mean, _var, rstd = _normalize(rows, lambda t: _moments(t, [-1]), eps)
    y = y * (weight.reshape(-1) if flat else weight) if weight is not None else y
    y = y + (bias.reshape(-1) if flat else bias) if bias is not None else y
    stats = list(x.shape[:axis]) + [1] * len(normalized_shape)
    return (y.view(x.shape) if flat else y), mean.view(stats), rstd.view(stats)
