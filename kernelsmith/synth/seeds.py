"""Seed operators: torch.nn modules, torch / torch.nn.functional ops and curated Transformer blocks.

Each seed says which ranks and dtypes it accepts and has a rule that, given its main operand's shape
and a random draw, makes one call: the constructor of its module or parameters (if any), the forward
expression, the shapes of any other operands it needs, and the output shape. The composer checks every
declared output shape by running the rendered task on meta tensors (compose.verify_on_meta).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

Shape = tuple[int, ...]
FLOAT = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class Operand:
    """An operand besides the main one: the same shape as an earlier value, or a new graph input."""

    shape: Shape
    dtype: str = "float32"
    high: int | None = None  # integer class labels in [0, high): always a new input


@dataclass(frozen=True)
class Op:
    """One call of a seed, ready to render: `{0}`, `{1}` are operands, `{m}` the module attribute."""

    seed: str
    expr: str
    out_shape: Shape
    args: dict = field(default_factory=dict)
    module: str | None = None  # constructor source of self.{m}
    needs: tuple[Operand, ...] = ()
    blocks: tuple[str, ...] = ()  # block classes the file must define
    # elements the call holds inside itself beside its operands and result (attention's scores, a gated MLP's
    # hidden values): no value of the graph, but GPU memory all the same (rubric.memory_need)
    scratch: int = 0


@dataclass(frozen=True)
class Seed:
    name: str
    family: str  # torch.nn, torch.nn.functional, torch, or block
    ranks: tuple[int, ...]
    rule: Callable[[random.Random, Shape], "Op | None"]
    dtypes: tuple[str, ...] = FLOAT
    terminal: bool = False  # its output is no tensor to build on (a scalar loss)
    weight: float = 1.0  # how often the composer picks it among those that fit

    def accepts(self, shape: Shape, dtype: str = "float32") -> bool:
        return len(shape) in self.ranks and dtype in self.dtypes


def _unary(name: str, expr: str, family: str, **args) -> Seed:
    return Seed(name, family, (1, 2, 3, 4), lambda rng, shape: Op(name, expr, shape, args))


def _param_choice(name: str, expr: str, family: str, choices: dict) -> Seed:
    """A shape-preserving call with hyperparameters drawn from choices ({arg: [values]})."""
    def rule(rng: random.Random, shape: Shape) -> Op:
        args = {k: rng.choice(v) for k, v in choices.items()}
        return Op(name, _fill(expr, **args), shape, args)
    return Seed(name, family, (1, 2, 3, 4), rule)


def _fill(expr: str, **values) -> str:
    """Hyperparameters into an expression, leaving the operand placeholders ({0}, {m}) to the renderer."""
    for key, value in values.items():
        expr = expr.replace("{" + key + "}", repr(value))
    return expr


def _binary(name: str, expr: str) -> Seed:
    return Seed(name, "torch", (1, 2, 3, 4), lambda rng, shape: Op(name, expr, shape, needs=(Operand(shape),)))


def _reduce(name: str, expr: str) -> Seed:
    def rule(rng: random.Random, shape: Shape) -> Op:
        keep = rng.random() < 0.5
        out = shape[:-1] + ((1,) if keep else ())
        return Op(name, _fill(expr, keep=keep), out, {"dim": -1, "keepdim": keep})
    return Seed(name, "torch", (2, 3, 4), rule)


def _last_dim(name: str, expr: str, family: str, module: str | None = None, blocks: tuple[str, ...] = ()) -> Seed:
    """A shape-preserving op over the last dimension (softmax, norms): module may use {d}."""
    def rule(rng: random.Random, shape: Shape) -> Op:
        return Op(name, expr, shape, {"dim": shape[-1]}, module.format(d=shape[-1]) if module else None,
                  blocks=blocks)
    return Seed(name, family, (2, 3, 4), rule)


FEATURES = (64, 128, 256, 512, 1024, 2048, 4096)


def _features_near(rng: random.Random, d: int) -> int:
    """An output width within a factor of 4 of the input's, so that one op does not dwarf the rest."""
    near = [f for f in FEATURES if d / 4 <= f <= d * 4] or [d]
    return rng.choice(near)


def _linear(rng: random.Random, shape: Shape) -> Op:
    out = _features_near(rng, shape[-1])
    bias = rng.random() < 0.8
    return Op("linear", "self.{m}({0})", shape[:-1] + (out,), {"in": shape[-1], "out": out, "bias": bias},
              f"nn.Linear({shape[-1]}, {out}, bias={bias})")


def _matmul(rng: random.Random, shape: Shape) -> Op:
    out = _features_near(rng, shape[-1])
    return Op("matmul", "torch.matmul({0}, {1})", shape[:-1] + (out,), {"k": shape[-1], "n": out},
              needs=(Operand((shape[-1], out)),))


def _bias_add(rng: random.Random, shape: Shape) -> Op:
    return Op("bias_add", "{0} + self.{m}", shape, {"size": shape[-1]}, f"nn.Parameter(torch.randn({shape[-1]}))")


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def _conv2d(rng: random.Random, shape: Shape) -> Op | None:
    n, c, h, w = shape
    out, kernel = rng.choice([c, 2 * c, max(c // 2, 1)]), rng.choice([1, 3, 5])
    stride, padding = rng.choice([1, 1, 2]), kernel // 2
    oh, ow = _conv_out(h, kernel, stride, padding), _conv_out(w, kernel, stride, padding)
    if min(oh, ow) < 1 or out > 512:
        return None
    return Op("conv2d", "self.{m}({0})", (n, out, oh, ow), {"in": c, "out": out, "kernel": kernel, "stride": stride},
              f"nn.Conv2d({c}, {out}, {kernel}, stride={stride}, padding={padding})")


def _conv1d(rng: random.Random, shape: Shape) -> Op | None:
    n, c, length = shape
    out, kernel = rng.choice([c, 2 * c, max(c // 2, 1)]), rng.choice([1, 3, 5])
    if out > 4096:
        return None
    return Op("conv1d", "self.{m}({0})", (n, out, _conv_out(length, kernel, 1, kernel // 2)),
              {"in": c, "out": out, "kernel": kernel}, f"nn.Conv1d({c}, {out}, {kernel}, padding={kernel // 2})")


def _conv_transpose2d(rng: random.Random, shape: Shape) -> Op | None:
    n, c, h, w = shape
    out, stride = rng.choice([c, max(c // 2, 1)]), rng.choice([1, 2])
    kernel = 3 if stride == 1 else 2
    padding = 1 if stride == 1 else 0
    size = lambda s: (s - 1) * stride - 2 * padding + kernel  # noqa: E731
    return Op("conv_transpose2d", "self.{m}({0})", (n, out, size(h), size(w)),
              {"in": c, "out": out, "kernel": kernel, "stride": stride},
              f"nn.ConvTranspose2d({c}, {out}, {kernel}, stride={stride}, padding={padding})")


def _pool2d(kind: str) -> Callable:
    def rule(rng: random.Random, shape: Shape) -> Op | None:
        n, c, h, w = shape
        if min(h, w) < 4:
            return None
        return Op(f"{kind}_pool2d", "self.{m}({0})", (n, c, h // 2, w // 2), {"kernel": 2},
                  f"nn.{'MaxPool2d' if kind == 'max' else 'AvgPool2d'}(2)")
    return rule


def _channels(name: str, ctor: str) -> Callable:
    """Norms over the channel dimension (dim 1) of an (N, C, ...) tensor."""
    def rule(rng: random.Random, shape: Shape) -> Op | None:
        c = shape[1]
        groups = next((g for g in (8, 4, 2) if c % g == 0 and c > g), 1)
        return Op(name, "self.{m}({0})", shape, {"channels": c}, ctor.format(c=c, g=groups))
    return rule


def _rotary(rng: random.Random, shape: Shape) -> Op | None:
    if shape[-1] % 2:
        return None
    return Op("rotary_embedding", "self.{m}({0})", shape, {"seq": shape[-2], "dim": shape[-1]},
              f"RotaryEmbedding({shape[-2]}, {shape[-1]})", blocks=("RotaryEmbedding",))


def _glu_mlp(kind: str) -> Callable:
    def rule(rng: random.Random, shape: Shape) -> Op:
        hidden = _features_near(rng, shape[-1])
        cls = "SwiGLU" if kind == "swiglu" else "GeGLU"
        return Op(f"{kind}_mlp", "self.{m}({0})", shape, {"dim": shape[-1], "hidden": hidden},
                  f"{cls}({shape[-1]}, {hidden})", blocks=(cls,), scratch=3 * math.prod(shape[:-1]) * hidden)
    return rule


def _attention(causal: bool) -> Callable:
    def rule(rng: random.Random, shape: Shape) -> Op | None:
        dim = shape[-1]
        heads = next((h for h in rng.sample([2, 4, 8, 16], 4) if dim % h == 0 and dim // h >= 8), None)
        if heads is None:
            return None
        batch, seq = shape[0], shape[1]
        return Op("causal_attention" if causal else "attention", "self.{m}({0})", shape,
                  {"dim": dim, "heads": heads, "causal": causal},
                  f"SelfAttention({dim}, {heads}, causal={causal})", blocks=("SelfAttention",),
                  # qkv, its heads and the weighted values; two (batch, heads, seq, seq) score tensors at a time
                  scratch=5 * batch * seq * dim + 2 * batch * heads * seq * seq)
    return rule


def _softmax_temperature(rng: random.Random, shape: Shape) -> Op:
    temperature = rng.choice([0.5, 0.7, 2.0])
    return Op("softmax_temperature", "torch.softmax({0} / %r, dim=-1)" % temperature, shape,
              {"temperature": temperature})


def _cross_entropy(rng: random.Random, shape: Shape) -> Op:
    return Op("cross_entropy", "F.cross_entropy({0}, {1})", (), {"classes": shape[-1]},
              needs=(Operand((shape[0],), "int64", high=shape[-1]),))


SEEDS: tuple[Seed, ...] = (
    _unary("relu", "torch.relu({0})", "torch"),
    _unary("sigmoid", "torch.sigmoid({0})", "torch"),
    _unary("tanh", "torch.tanh({0})", "torch"),
    _unary("abs", "torch.abs({0})", "torch"),
    _unary("gelu", "F.gelu({0})", "torch.nn.functional"),
    _unary("silu", "F.silu({0})", "torch.nn.functional"),
    _unary("softplus", "F.softplus({0})", "torch.nn.functional"),
    _unary("elu", "F.elu({0})", "torch.nn.functional"),
    _unary("selu", "F.selu({0})", "torch.nn.functional"),
    _unary("hardswish", "F.hardswish({0})", "torch.nn.functional"),
    _unary("mish", "F.mish({0})", "torch.nn.functional"),
    _unary("logsigmoid", "F.logsigmoid({0})", "torch.nn.functional"),
    _param_choice("leaky_relu", "F.leaky_relu({0}, {slope})", "torch.nn.functional", {"slope": [0.01, 0.1, 0.2]}),
    _param_choice("hardtanh", "F.hardtanh({0}, -{limit}, {limit})", "torch.nn.functional", {"limit": [0.5, 1.0, 2.0]}),
    _param_choice("clamp", "torch.clamp({0}, min={low}, max={high})", "torch", {"low": [-1.0, -0.5], "high": [0.5, 1.0]}),
    _param_choice("scale", "{0} * {factor}", "torch", {"factor": [0.5, 1.5, 2.0, 3.0]}),
    _binary("add", "{0} + {1}"),
    _binary("mul", "{0} * {1}"),
    _binary("sub", "{0} - {1}"),
    _binary("maximum", "torch.maximum({0}, {1})"),
    Seed("bias_add", "torch.nn", (2, 3, 4), _bias_add),
    _reduce("sum", "torch.sum({0}, dim=-1, keepdim={keep})"),
    _reduce("mean", "torch.mean({0}, dim=-1, keepdim={keep})"),
    _reduce("amax", "torch.amax({0}, dim=-1, keepdim={keep})"),
    _reduce("logsumexp", "torch.logsumexp({0}, dim=-1, keepdim={keep})"),
    _last_dim("softmax", "torch.softmax({0}, dim=-1)", "torch"),
    _last_dim("log_softmax", "F.log_softmax({0}, dim=-1)", "torch.nn.functional"),
    _last_dim("cumsum", "torch.cumsum({0}, dim=-1)", "torch"),
    _last_dim("layer_norm_module", "self.{m}({0})", "torch.nn", "nn.LayerNorm({d})"),
    Seed("linear", "torch.nn", (2, 3), _linear, weight=6.0),
    Seed("matmul", "torch", (2, 3), _matmul, weight=3.0),
    Seed("conv2d", "torch.nn", (4,), _conv2d, weight=6.0),
    Seed("conv1d", "torch.nn", (3,), _conv1d, weight=2.0),
    Seed("conv_transpose2d", "torch.nn", (4,), _conv_transpose2d, weight=3.0),
    Seed("max_pool2d", "torch.nn", (4,), _pool2d("max")),
    Seed("avg_pool2d", "torch.nn", (4,), _pool2d("avg")),
    Seed("batch_norm2d", "torch.nn", (4,), _channels("batch_norm2d", "nn.BatchNorm2d({c})")),
    Seed("group_norm", "torch.nn", (3, 4), _channels("group_norm", "nn.GroupNorm({g}, {c})")),
    Seed("instance_norm2d", "torch.nn", (4,), _channels("instance_norm2d", "nn.InstanceNorm2d({c}, affine=True)")),
    # the curated Transformer blocks
    _last_dim("rms_norm", "self.{m}({0})", "block", "RMSNorm({d})", ("RMSNorm",)),
    _last_dim("layer_norm", "self.{m}({0})", "block", "LayerNorm({d})", ("LayerNorm",)),
    Seed("rotary_embedding", "block", (3, 4), _rotary),
    Seed("swiglu_mlp", "block", (2, 3), _glu_mlp("swiglu"), weight=2.0),
    Seed("geglu_mlp", "block", (2, 3), _glu_mlp("geglu"), weight=2.0),
    Seed("attention", "block", (3,), _attention(causal=False), weight=2.0),
    Seed("causal_attention", "block", (3,), _attention(causal=True), weight=2.0),
    Seed("softmax_temperature", "block", (2, 3, 4), _softmax_temperature),
    Seed("cross_entropy", "block", (2,), _cross_entropy, dtypes=("float32",), terminal=True),
)
BY_NAME = {seed.name: seed for seed in SEEDS}

def _gated_mlp(name: str, activation: str) -> str:
    """The source of a gated MLP block (SwiGLU, GeGLU): the same layers, another activation."""
    return f'''
class {name}(nn.Module):
    """down({activation}(gate(x)) * up(x))."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.{activation}(self.gate(x)) * self.up(x))
'''


BLOCKS = {
    "RMSNorm": '''
class RMSNorm(nn.Module):
    """x / rms(x) * weight over the last dimension."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight
''',
    "LayerNorm": '''
class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dimension."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias
''',
    "RotaryEmbedding": '''
class RotaryEmbedding(nn.Module):
    """Rotary position embedding over (..., seq, dim): pairs of channels rotated by position."""

    def __init__(self, seq, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", torch.cat([angles.cos(), angles.cos()], dim=-1))
        self.register_buffer("sin", torch.cat([angles.sin(), angles.sin()], dim=-1))

    def forward(self, x):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * self.cos + rotated * self.sin
''',
    "SwiGLU": _gated_mlp("SwiGLU", "silu"),
    "GeGLU": _gated_mlp("GeGLU", "gelu"),
    "SelfAttention": '''
class SelfAttention(nn.Module):
    """Multi-head self-attention over (batch, seq, dim), written out: qkv projection, scores,
    an optional causal mask, softmax, weighted values and an output projection."""

    def __init__(self, dim, heads, causal=False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dim // self.heads)
        if self.causal:
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(batch, seq, dim))
''',
}
