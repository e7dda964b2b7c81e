"""Pointwise ops as C expressions over float, shared by the CUDA and the C++ generators.

Each entry renders `out = f(args)`: `{0}`, `{1}`, `{2}` are the arguments (already float
expressions), and attrs fill named fields. The math functions (expf, tanhf, erff, ...) exist
with these names both in CUDA device code and in C++ <cmath>.
"""

from __future__ import annotations

import re

from kernelsmith.compiler.ir import Op

INV_SQRT2 = "0.70710678118654752f"
SQRT_2_OVER_PI = "0.79788456080286536f"

# name -> C expression; fields other than {0}/{1}/{2} come from the op's attrs.
POINTWISE = {
    "copy": "{0}",
    "add": "({0} + {alpha} * {1})",
    "sub": "({0} - {alpha} * {1})",
    "rsub": "({1} - {alpha} * {0})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "neg": "(-{0})",
    "maximum": "fmaxf({0}, {1})",
    "minimum": "fminf({0}, {1})",
    "relu": "fmaxf({0}, 0.0f)",
    "sigmoid": "(1.0f / (1.0f + expf(-{0})))",
    "tanh": "tanhf({0})",
    "exp": "expf({0})",
    "log": "logf({0})",
    "log1p": "log1pf({0})",
    "expm1": "expm1f({0})",
    "abs": "fabsf({0})",
    "sqrt": "sqrtf({0})",
    "rsqrt": "(1.0f / sqrtf({0}))",
    "reciprocal": "(1.0f / {0})",
    "sin": "sinf({0})",
    "cos": "cosf({0})",
    "erf": "erff({0})",
    "floor": "floorf({0})",
    "ceil": "ceilf({0})",
    "sign": "(float)(({0} > 0.0f) - ({0} < 0.0f))",
    "pow_scalar": "powf({0}, {exponent})",
    "square": "({0} * {0})",
    "pow": "powf({0}, {1})",
    "gelu": f"(0.5f * {{0}} * (1.0f + erff({{0}} * {INV_SQRT2})))",
    "gelu_tanh": f"(0.5f * {{0}} * (1.0f + tanhf({SQRT_2_OVER_PI} * ({{0}} + 0.044715f * {{0}} * {{0}} * {{0}}))))",
    "silu": "({0} / (1.0f + expf(-{0})))",
    "mish": "({0} * tanhf(({0} > 20.0f) ? {0} : log1pf(expf({0}))))",
    "softplus": "(({0} * {beta} > {threshold}) ? {0} : log1pf(expf({0} * {beta})) / {beta})",
    "elu": "(({0} > 0.0f) ? {scale} * {0} : {scale} * {alpha} * expm1f({0} * {input_scale}))",
    "leaky_relu": "(({0} > 0.0f) ? {0} : {0} * {negative_slope})",
    "hardtanh": "fminf(fmaxf({0}, {min}), {max})",
    "clamp_min": "fmaxf({0}, {min})",
    "clamp_max": "fminf({0}, {max})",
    "clamp": "fminf(fmaxf({0}, {min}), {max})",
    "hardsigmoid": "fminf(fmaxf({0} / 6.0f + 0.5f, 0.0f), 1.0f)",
    "hardswish": "({0} * fminf(fmaxf({0} + 3.0f, 0.0f), 6.0f) / 6.0f)",
    "where": "(({0} != 0.0f) ? {1} : {2})",
    "logical_not": "(({0} == 0.0f) ? 1.0f : 0.0f)",  # a bool as 0.0 or 1.0, as bool inputs are loaded
    "eq": "(({0} == {1}) ? 1.0f : 0.0f)",
    "ne": "(({0} != {1}) ? 1.0f : 0.0f)",
    "gt": "(({0} > {1}) ? 1.0f : 0.0f)",
    "ge": "(({0} >= {1}) ? 1.0f : 0.0f)",
    "lt": "(({0} < {1}) ? 1.0f : 0.0f)",
    "le": "(({0} <= {1}) ? 1.0f : 0.0f)",
    "bn_scale": "({0} / sqrtf({1} + {eps}))",  # batch norm in inference: (x - mean) / sqrt(var + eps)
}

DEFAULT_ATTRS = {"add": {"alpha": 1.0}, "sub": {"alpha": 1.0}, "rsub": {"alpha": 1.0},
                 "softplus": {"beta": 1.0, "threshold": 20.0},
                 "elu": {"alpha": 1.0, "scale": 1.0, "input_scale": 1.0},
                 "leaky_relu": {"negative_slope": 0.01}, "hardtanh": {"min": -1.0, "max": 1.0}}


def literal(value: float) -> str:
    """A float literal C and CUDA both read exactly (inf and nan spelled out)."""
    value = float(value)
    if value != value:
        return "NAN"
    if value in (float("inf"), float("-inf")):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return f"{value!r}f" if "e" in repr(value) or "." in repr(value) else f"{value!r}.0f"


def render(op: Op, arg_exprs: list[str]) -> str:
    """The C expression of one op, given C expressions for its arguments."""
    attrs = {**DEFAULT_ATTRS.get(op.name, {}), **op.attrs}
    fields = {k: literal(v) if isinstance(v, (int, float)) else str(v) for k, v in attrs.items()}
    return POINTWISE[op.name].format(*arg_exprs, **fields)


def arg_expr(arg, names: dict[str, str]) -> str:
    """A C expression for an op argument: a scalar literal, or the variable holding a value."""
    return literal(arg) if not isinstance(arg, str) else names[arg]


def body_lines(ops: list[Op], names: dict[str, str], indent: str = "    ",
               math: dict[str, str] | None = None) -> list[str]:
    """`const float vN = ...;` for each op in order; `names` maps value names to C variables
    (inputs already loaded) and is extended with each op's result. `math` renames math functions for a
    target with its own versions (the CPU's vectorisable erff)."""
    lines = []
    for op in ops:
        var = f"v_{op.out}"
        expr = render(op, [arg_expr(a, names) for a in op.args])
        for function, replacement in (math or {}).items():
            expr = re.sub(rf"\b{function}\(", f"{replacement}(", expr)
        lines.append(f"{indent}const float {var} = {expr};")
        names[op.out] = var
    return lines
