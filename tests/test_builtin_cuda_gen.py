"""The built-in policy's CUDA generator: hand-built groups -> .cu + binding text, and every
generated .cu compiles with nvcc (compile only: no GPU; the cuBLAS and cuDNN files only where
their headers are installed).

CASES is shared with tests/gpu/test_builtin_cuda_gpu.py, which runs the kernels against torch.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from kernelsmith.compiler import cuda
from kernelsmith.evaluation import build_plan
from kernelsmith.compiler.ir import (CatGroup, ConvGroup, GemmGroup, Generated, Group, MatrixLayout, Op, PointwiseGroup,
                                     PoolGroup, ReductionGroup, Value)

TORCH_HEADER = re.compile(r'^\s*#\s*include\s*[<"](torch|ATen|c10)/', re.MULTILINE)


@dataclass
class Case:
    group: Group
    values: dict[str, Value]
    reference: Callable  # (torch, {input name: tensor}) -> list of expected outputs
    atol: float = 1e-5
    rtol: float = 1e-4
    tags: set[str] = field(default_factory=set)
    precision: str = "fp32"  # what cuda.generate is told (the cuBLAS and cuDNN math)


def _v(name: str, shape, dtype: str = "float32", contiguous: bool = True) -> Value:
    return Value(name, tuple(shape), dtype, contiguous=contiguous)


def _values(*items: Value) -> dict[str, Value]:
    return {v.name: v for v in items}


def pointwise_case() -> Case:
    """((gelu((x + bias) * s) * 0.5) + xt, x + bias): a [C, 1, 1] bias, a scalar, a permuted view."""
    x, bias, s = _v("x", (2, 3, 5, 7)), _v("bias", (3, 1, 1)), _v("s", (1,))
    xt = _v("xt", (2, 3, 5, 7), contiguous=False)
    t1, t2, t3, t4, t5 = (_v(n, (2, 3, 5, 7)) for n in ("t1", "t2", "t3", "t4", "t5"))
    body = [Op("add", ["x", "bias"], "t1"), Op("mul", ["t1", "s"], "t2"), Op("gelu", ["t2"], "t3"),
            Op("mul", ["t3", 0.5], "t4"), Op("add", ["t4", "xt"], "t5")]
    group = PointwiseGroup("k0_pointwise", [x, bias, s, xt], [t5, t1], shape=(2, 3, 5, 7), body=body)

    def ref(torch, t):
        t1 = t["x"] + t["bias"]
        return [torch.nn.functional.gelu(t1 * t["s"]) * 0.5 + t["xt"], t1]
    return Case(group, _values(x, bias, s, xt, t1, t2, t3, t4, t5), ref)


def softmax_case(shape=(64, 1000), name: str = "k1_softmax") -> Case:
    x, y = _v("x", shape), _v("y", shape)
    group = ReductionGroup(name, [x], [y], in_shape=shape, dims=(1,), reduce="softmax", operand="x", result="y",
                           result_shape=shape)
    return Case(group, _values(x, y), lambda torch, t: [torch.softmax(t["x"], dim=1)])


def rmsnorm_case() -> Case:
    """x * rsqrt(mean(x^2, -1, keepdim) + eps) * w."""
    n = 512
    x, w, sq, ms = _v("x", (8, n)), _v("w", (n,)), _v("sq", (8, n)), _v("ms", (8, 1))
    e1, e2, y1, y = _v("e1", (8, 1)), _v("e2", (8, 1)), _v("y1", (8, n)), _v("y", (8, n))
    group = ReductionGroup("k2_rmsnorm", [x, w], [y], in_shape=(8, n), dims=(1,), keepdim=True, reduce="mean",
                           operand="sq", result="ms", result_shape=(8, 1), prologue=[Op("square", ["x"], "sq")],
                           epilogue=[Op("add", ["ms", 1e-6], "e1"), Op("rsqrt", ["e1"], "e2")],
                           broadcast_epilogue=[Op("mul", ["x", "e2"], "y1"), Op("mul", ["y1", "w"], "y")])

    def ref(torch, t):
        xx = t["x"]
        return [xx * torch.rsqrt(xx.pow(2).mean(-1, keepdim=True) + 1e-6) * t["w"]]
    return Case(group, _values(x, w, sq, ms, e1, e2, y1, y), ref)


def column_sum_case() -> Case:
    """s = x.sum(1) over [B, R, I], and s + c with c [I] read at the reduced shape."""
    x, c, s, e = _v("x", (4, 300, 33)), _v("c", (33,)), _v("s", (4, 33)), _v("e", (4, 33))
    group = ReductionGroup("k3_colsum", [x, c], [s, e], in_shape=(4, 300, 33), dims=(1,), reduce="sum",
                           operand="x", result="s", result_shape=(4, 33), epilogue=[Op("add", ["s", "c"], "e")])
    return Case(group, _values(x, c, s, e), lambda torch, t: [t["x"].sum(1), t["x"].sum(1) + t["c"]],
                atol=1e-4)


def argmax_case() -> Case:
    """argmax over dim 1 of [6, 50, 5] (a column reduction), int64 result."""
    x, idx = _v("x", (6, 50, 5)), _v("idx", (6, 5), "int64")
    group = ReductionGroup("k4_argmax", [x], [idx], in_shape=(6, 50, 5), dims=(1,), reduce="argmax", operand="x",
                           result="idx", result_shape=(6, 5))
    return Case(group, _values(x, idx), lambda torch, t: [t["x"].argmax(1)])


def gemm_case() -> Case:
    """gelu(x @ W^T + b): nn.Linear's layout (trans_b) with a bias and a GELU epilogue."""
    m, n, k = 48, 24, 40
    x, w, b, mm, y = _v("x", (m, k)), _v("w", (n, k)), _v("b", (n,)), _v("mm", (m, n)), _v("y", (m, n))
    group = GemmGroup("k5_gemm", [x, w, b], [y], a="x", b="w", bias="b", trans_b=True, m=m, n=n, k=k,
                      result="mm", out_shape=(m, n), epilogue=[Op("gelu", ["mm"], "y")])

    def ref(torch, t):
        return [torch.nn.functional.gelu(t["x"] @ t["w"].t() + t["b"])]
    return Case(group, _values(x, w, b, mm, y), ref, atol=1e-4, rtol=1e-3, tags={"gemm"})


# --- more, run on the GPU (and compiled here too) ------------------------------------------

def log_softmax_case() -> Case:
    """log_softmax of long rows (several warps per row), times 2 per element."""
    shape = (16, 3001)
    x, y, z = _v("x", shape), _v("y", shape), _v("z", shape)
    group = ReductionGroup("k6_log_softmax", [x], [z], in_shape=shape, dims=(1,), reduce="log_softmax", operand="x",
                           result="y", result_shape=shape, epilogue=[Op("mul", ["y", 2.0], "z")])
    return Case(group, _values(x, y, z), lambda torch, t: [torch.log_softmax(t["x"], dim=1) * 2.0])


def column_softmax_case() -> Case:
    """softmax over dim 1 of [3, 70, 20]: a full-shape reduction with inner > 1."""
    shape = (3, 70, 20)
    x, y = _v("x", shape), _v("y", shape)
    group = ReductionGroup("k7_colsoftmax", [x], [y], in_shape=shape, dims=(1,), reduce="softmax", operand="x",
                           result="y", result_shape=shape)
    return Case(group, _values(x, y), lambda torch, t: [torch.softmax(t["x"], dim=1)])


def logsumexp_amax_case() -> Case:
    """logsumexp over dims (1, 2) of 2 * x, plus the prologue value as a second output."""
    shape = (5, 9, 31)
    x, x2, lse = _v("x", shape), _v("x2", shape), _v("lse", (5,))
    group = ReductionGroup("k8_logsumexp", [x], [lse, x2], in_shape=shape, dims=(1, 2), reduce="logsumexp",
                           operand="x2", result="lse", result_shape=(5,), prologue=[Op("mul", ["x", 2.0], "x2")])
    return Case(group, _values(x, x2, lse),
                lambda torch, t: [torch.logsumexp(2 * t["x"], dim=(1, 2)), 2 * t["x"]])


def amax_case() -> Case:
    shape = (7, 129)
    x, y = _v("x", shape), _v("y", (7,))
    group = ReductionGroup("k9_amax", [x], [y], in_shape=shape, dims=(1,), reduce="amin", operand="x", result="y",
                           result_shape=(7,))
    return Case(group, _values(x, y), lambda torch, t: [t["x"].amin(1)])


def norm_all_case() -> Case:
    """The 2-norm of a whole tensor (one row), then an epilogue op."""
    shape = (33, 65)
    x, y, z = _v("x", shape), _v("y", ()), _v("z", ())
    group = ReductionGroup("k10_norm", [x], [z], in_shape=shape, dims=(0, 1), reduce="norm2", operand="x",
                           result="y", result_shape=(), epilogue=[Op("add", ["y", 1.0], "z")])
    return Case(group, _values(x, y, z), lambda torch, t: [torch.linalg.vector_norm(t["x"]) + 1.0])


def bmm_case() -> Case:
    """relu(0.5 * a @ b) for a [3, 17, 9] and b [3, 9, 13], and the raw product too."""
    a, b = _v("a", (3, 17, 9)), _v("b", (3, 9, 13))
    mm, y = _v("mm", (3, 17, 13)), _v("y", (3, 17, 13))
    group = GemmGroup("k11_bmm", [a, b], [mm, y], a="a", b="b", batch=3, m=17, n=13, k=9, alpha=0.5, result="mm",
                      out_shape=(3, 17, 13), epilogue=[Op("relu", ["mm"], "y")])

    def ref(torch, t):
        mm = 0.5 * torch.bmm(t["a"], t["b"])
        return [mm, torch.relu(mm)]
    return Case(group, _values(a, b, mm, y), ref, atol=1e-4, rtol=1e-3, tags={"gemm"})


def linear_case() -> Case:
    """x @ W^T + b alone (no epilogue ops), with beta = 2 on a [1, n] bias."""
    m, n, k = 37, 50, 64
    x, w, b, y = _v("x", (m, k)), _v("w", (n, k)), _v("b", (1, n)), _v("y", (m, n))
    group = GemmGroup("k12_linear", [x, w, b], [y], a="x", b="w", bias="b", trans_b=True, m=m, n=n, k=k, beta=2.0,
                      result="y", out_shape=(m, n))
    return Case(group, _values(x, w, b, y), lambda torch, t: [t["x"] @ t["w"].t() + 2.0 * t["b"]],
                atol=1e-4, rtol=1e-3, tags={"gemm"})


def mm_case() -> Case:
    """A plain a @ b: cuBLAS alone, no epilogue kernel."""
    a, b, y = _v("a", (20, 30)), _v("b", (30, 10)), _v("y", (20, 10))
    group = GemmGroup("k13_mm", [a, b], [y], a="a", b="b", m=20, n=10, k=30, result="y", out_shape=(20, 10))
    return Case(group, _values(a, b, y), lambda torch, t: [t["a"] @ t["b"]], atol=1e-4, rtol=1e-3, tags={"gemm"})


def mm_transposed_case() -> Case:
    """A plain a @ b of two transposed views, read in place (column-major: CUBLAS_OP_T, their rows as leading
    dimensions; the GPU test makes each a transposed tensor)."""
    m, n, k = 19, 11, 23
    a, b, y = _v("a", (m, k), contiguous=False), _v("b", (k, n), contiguous=False), _v("y", (m, n))
    group = GemmGroup("k40_mm_transposed", [a, b], [y], a="a", b="b", m=m, n=n, k=k, result="y", out_shape=(m, n),
                      a_layout=MatrixLayout(True, m, 0, (1, m)), b_layout=MatrixLayout(True, k, 0, (1, k)))
    return Case(group, _values(a, b, y), lambda torch, t: [t["a"] @ t["b"]], atol=1e-4, rtol=1e-3, tags={"gemm"})


def tf32x3_case() -> Case:
    """relu(x @ W^T + b) with every size a multiple of 4 (3xTF32's 16-byte loads), m not one of a tile: where
    CUTLASS is installed the GPU test runs its tiles, not only the fall back to SGEMM."""
    case = gemm_case()
    m, n, k = 200, 96, 264
    g = case.group
    g.name, g.m, g.n, g.k, g.out_shape, g.epilogue = "k41_tf32x3", m, n, k, (m, n), [Op("relu", ["mm"], "y")]
    for name, shape in (("x", (m, k)), ("w", (n, k)), ("b", (n,)), ("mm", (m, n)), ("y", (m, n))):
        case.values[name].shape = shape
    case.reference = lambda torch, t: [torch.relu(t["x"] @ t["w"].t() + t["b"])]
    return case


def tf32x3_batched_case() -> Case:
    """A batched a @ b^T of aligned sizes with alpha 0.25: the tiles' batched mode, B column-major."""
    a, b, y = _v("a", (2, 36, 20)), _v("b", (2, 28, 20)), _v("y", (2, 36, 28))
    group = GemmGroup("k42_tf32x3_bmm", [a, b], [y], a="a", b="b", batch=2, m=36, n=28, k=20, alpha=0.25,
                      trans_b=True, result="y", out_shape=(2, 36, 28))
    return Case(group, _values(a, b, y), lambda torch, t: [0.25 * t["a"] @ t["b"].transpose(1, 2)],
                atol=1e-4, rtol=1e-3, tags={"gemm"})


def conv2d_case() -> Case:
    """relu(conv2d(x, w) + bias): 2 groups, stride (2, 1), padding (1, 0), dilation (1, 2)."""
    x, w, bias = _v("x", (2, 4, 9, 11)), _v("w", (6, 2, 3, 2)), _v("bias", (6, 1, 1))
    conv, biased, y = _v("conv", (2, 6, 5, 9)), _v("biased", (2, 6, 5, 9)), _v("y", (2, 6, 5, 9))
    group = ConvGroup("k14_conv2d", [x, w, bias], [y], x="x", w="w", stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                      output_padding=(0, 0), groups=2, result="conv", in_shape=x.shape, w_shape=w.shape,
                      out_shape=y.shape, epilogue=[Op("add", ["conv", "bias"], "biased", {"alpha": 1.0}),
                                                   Op("relu", ["biased"], "y")])

    def ref(torch, t):
        out = torch.nn.functional.conv2d(t["x"], t["w"], stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)
        return [torch.relu(out + t["bias"])]
    return Case(group, _values(x, w, bias, conv, biased, y), ref, atol=1e-4, tags={"conv"})


def conv_transpose1d_case() -> Case:
    """conv_transpose1d alone (cuDNN's backward-data pass, no epilogue kernel): stride 2,
    padding 1, output_padding 1."""
    x, w, y = _v("x", (2, 4, 9)), _v("w", (4, 3, 3)), _v("y", (2, 3, 18))
    group = ConvGroup("k15_convt1d", [x, w], [y], x="x", w="w", stride=(2,), padding=(1,), dilation=(1,),
                      output_padding=(1,), transposed=True, result="y", in_shape=x.shape, w_shape=w.shape,
                      out_shape=y.shape)

    def ref(torch, t):
        return [torch.nn.functional.conv_transpose1d(t["x"], t["w"], stride=2, padding=1, output_padding=1)]
    return Case(group, _values(x, w, y), ref, atol=1e-4, tags={"conv"})


def depthwise_conv3d_case() -> Case:
    """A depthwise conv3d (groups = channels) kept as an output, and 2x it as a second one."""
    x, w = _v("x", (1, 3, 4, 5, 6)), _v("w", (3, 1, 3, 3, 3))
    conv, y = _v("conv", (1, 3, 4, 5, 6)), _v("y", (1, 3, 4, 5, 6))
    group = ConvGroup("k16_dwconv3d", [x, w], [conv, y], x="x", w="w", stride=(1, 1, 1), padding=(1, 1, 1),
                      dilation=(1, 1, 1), output_padding=(0, 0, 0), groups=3, result="conv", in_shape=x.shape,
                      w_shape=w.shape, out_shape=y.shape, epilogue=[Op("mul", ["conv", 2.0], "y")])

    def ref(torch, t):
        out = torch.nn.functional.conv3d(t["x"], t["w"], padding=1, groups=3)
        return [out, out * 2.0]
    return Case(group, _values(x, w, conv, y), ref, atol=1e-4, tags={"conv"})


def max_pool_case() -> Case:
    """clamp(max_pool2d(x)) with padding, dilation and a partial last window (ceil_mode's shape)."""
    x, pooled, y = _v("x", (2, 3, 11, 10)), _v("pooled", (2, 3, 5, 5)), _v("y", (2, 3, 5, 5))
    group = PoolGroup("k17_maxpool", [x], [y], x="x", mode="max", kernel=(3, 3), stride=(2, 2), padding=(1, 1),
                      dilation=(2, 2), result="pooled", in_shape=x.shape, out_shape=y.shape,
                      epilogue=[Op("clamp", ["pooled"], "y", {"min": -0.5, "max": 0.5})])

    def ref(torch, t):
        out = torch.nn.functional.max_pool2d(t["x"], 3, stride=2, padding=1, dilation=2, ceil_mode=True)
        return [out.clamp(-0.5, 0.5)]
    return Case(group, _values(x, pooled, y), ref, tags={"pool"})


def avg_pool3d_case() -> Case:
    """avg_pool3d with padding, the divisor counting only the input (count_include_pad=False)."""
    x, y = _v("x", (1, 2, 5, 4, 3)), _v("y", (1, 2, 3, 3, 2))
    group = PoolGroup("k18_avgpool3d", [x], [y], x="x", mode="avg", kernel=(2, 2, 2), stride=(2, 2, 2),
                      padding=(1, 1, 1), dilation=(1, 1, 1), count_include_pad=False, result="y", in_shape=x.shape,
                      out_shape=y.shape)

    def ref(torch, t):
        return [torch.nn.functional.avg_pool3d(t["x"], 2, padding=1, count_include_pad=False)]
    return Case(group, _values(x, y), ref, tags={"pool"})


def pool_prologue_case() -> Case:
    """clamp(max_pool2d((x + b) * z)): an earlier kernel's epilogue computed where the pool reads it (its
    prologue), the per-channel b loaded once per output element and z at each element of the window."""
    x, z, b = _v("x", (2, 4, 9, 10)), _v("z", (2, 4, 9, 10)), _v("b", (4, 1, 1))
    xb, xz, pooled, y = _v("xb", x.shape), _v("xz", x.shape), _v("pooled", (2, 4, 5, 6)), _v("y", (2, 4, 5, 6))
    group = PoolGroup("k41_pool_prologue", [x, b, z], [y], x="xz", mode="max", kernel=(2, 2), stride=(2, 2),
                      padding=(1, 1), dilation=(1, 1), result="pooled", in_shape=x.shape, out_shape=y.shape,
                      prologue=[Op("add", ["x", "b"], "xb", {"alpha": 1.0}), Op("mul", ["xb", "z"], "xz")],
                      epilogue=[Op("clamp", ["pooled"], "y", {"min": -0.5, "max": 0.5})])

    def ref(torch, t):
        out = torch.nn.functional.max_pool2d((t["x"] + t["b"]) * t["z"], 2, stride=2, padding=1)
        return [out.clamp(-0.5, 0.5)]
    return Case(group, _values(x, z, b, xb, xz, pooled, y), ref, tags={"pool"})


def avg_pool_prologue_case() -> Case:
    """avg_pool3d of sigmoid(x) where x is a strided view, read through its strides in the prologue; the
    padding counts zeros of the activated value (count_include_pad)."""
    x, s, y = _v("x", (1, 2, 5, 4, 3), contiguous=False), _v("s", (1, 2, 5, 4, 3)), _v("y", (1, 2, 3, 3, 2))
    group = PoolGroup("k42_avg_pool_prologue", [x], [y], x="s", mode="avg", kernel=(2, 2, 2), stride=(2, 2, 2),
                      padding=(1, 1, 1), dilation=(1, 1, 1), result="y", in_shape=x.shape, out_shape=y.shape,
                      prologue=[Op("sigmoid", ["x"], "s")])

    def ref(torch, t):
        return [torch.nn.functional.avg_pool3d(torch.sigmoid(t["x"]), 2, padding=1)]
    return Case(group, _values(x, s, y), ref, tags={"pool"})


def cumsum_rows_case() -> Case:
    """relu(cumsum(2x - y, dim=1)) + y over rows longer than one tile (3000 > 1024), with the
    prologue value kept as a second output."""
    shape = (5, 3000)
    x, y, t, d, c, r, z = (_v(n, shape) for n in ("x", "y", "t", "d", "c", "r", "z"))
    group = ReductionGroup("k19_cumsum_rows", [x, y], [z, d], in_shape=shape, dims=(1,), reduce="cumsum",
                           operand="d", result="c", result_shape=shape,
                           prologue=[Op("mul", ["x", 2.0], "t"), Op("sub", ["t", "y"], "d", {"alpha": 1.0})],
                           epilogue=[Op("relu", ["c"], "r"), Op("add", ["r", "y"], "z", {"alpha": 1.0})])

    def ref(torch, t):
        d = 2.0 * t["x"] - t["y"]
        return [torch.relu(torch.cumsum(d, dim=1)) + t["y"], d]
    return Case(group, _values(x, y, t, d, c, r, z), ref, atol=1e-3, rtol=1e-4)


def cumsum_columns_case() -> Case:
    """cumsum(sigmoid(x), dim=1) of [3, 200, 17]: a scan with inner > 1, one thread per line."""
    shape = (3, 200, 17)
    x, s, c = _v("x", shape), _v("s", shape), _v("c", shape)
    group = ReductionGroup("k20_cumsum_cols", [x], [c], in_shape=shape, dims=(1,), reduce="cumsum", operand="s",
                           result="c", result_shape=shape, prologue=[Op("sigmoid", ["x"], "s")])
    return Case(group, _values(x, s, c), lambda torch, t: [torch.cumsum(torch.sigmoid(t["x"]), dim=1)],
                atol=1e-4, rtol=1e-4)


def masked_case() -> Case:
    """where(mask, relu(x), 2y) + x * keep: a dense bool mask (vectorised as uchar4) and a [1, 37]
    bool row broadcast over the rows (a strided read), both joining float math as 0 or 1."""
    shape = (9, 37)
    x, y, mask, keep = _v("x", shape), _v("y", shape), _v("mask", shape, "bool"), _v("keep", (1, 37), "bool")
    r, d, w, k, z = (_v(n, shape) for n in ("r", "d", "w", "k", "z"))
    body = [Op("relu", ["x"], "r"), Op("mul", ["y", 2.0], "d"), Op("where", ["mask", "r", "d"], "w"),
            Op("mul", ["x", "keep"], "k"), Op("add", ["w", "k"], "z", {"alpha": 1.0})]
    group = PointwiseGroup("k21_masked", [x, y, mask, keep], [z], shape=shape, body=body)

    def ref(torch, t):
        return [torch.where(t["mask"], torch.relu(t["x"]), 2.0 * t["y"]) + t["x"] * t["keep"]]
    return Case(group, _values(x, y, mask, keep, r, d, w, k, z), ref)


def float_input_case() -> Case:
    """relu(x * s) + s with s a Python float: a kernel argument by value, not a pointer."""
    shape = (6, 50)
    x, s, m, r, y = _v("x", shape), Value("s", (), scalar=True), _v("m", shape), _v("r", shape), _v("y", shape)
    body = [Op("mul", ["x", "s"], "m"), Op("relu", ["m"], "r"), Op("add", ["r", "s"], "y", {"alpha": 1.0})]
    group = PointwiseGroup("k22_float_input", [x, s], [y], shape=shape, body=body)
    return Case(group, _values(x, s, m, r, y), lambda torch, t: [torch.relu(t["x"] * t["s"]) + t["s"]])


def frobenius_case() -> Case:
    """x / ||x|| over a whole [4, 64, 300] tensor: one long row, split across blocks (pass 2 divides
    chunk by chunk), with the norm itself as a second output."""
    shape = (4, 64, 300)
    x, n, y = _v("x", shape), _v("n", ()), _v("y", shape)
    group = ReductionGroup("k23_frobenius", [x], [y, n], in_shape=shape, dims=(0, 1, 2), reduce="norm2", operand="x",
                           result="n", result_shape=(), broadcast_epilogue=[Op("div", ["x", "n"], "y")])

    def ref(torch, t):
        norm = torch.linalg.vector_norm(t["x"])
        return [t["x"] / norm, norm]
    return Case(group, _values(x, n, y), ref, atol=1e-5, rtol=1e-4, tags={"split"})


def safe_softmax_case() -> Case:
    """Attention's softmax: the scores where(mask, x, -inf), then where(rows, ..., -inf) hiding whole rows
    ([6, 1], broadcast: half of them at random), then a softmax that is 0 on a row with no key left and must
    not compute exp(-inf - -inf) where a row starts masked."""
    shape = (6, 70)
    x, mask, rows = _v("x", shape), _v("mask", shape, "bool"), _v("rows", (6, 1), "bool")
    s0, s, y = _v("s0", shape), _v("s", shape), _v("y", shape)
    prologue = [Op("where", ["mask", "x", float("-inf")], "s0"), Op("where", ["rows", "s0", float("-inf")], "s")]
    group = ReductionGroup("k28_safe_softmax", [x, mask, rows], [y], in_shape=shape, dims=(1,),
                           reduce="safe_softmax", operand="s", result="y", result_shape=shape, prologue=prologue)

    def ref(torch, t):
        scores = torch.where(t["mask"] & t["rows"], t["x"], float("-inf"))
        return [torch.nan_to_num(torch.softmax(scores, dim=1), nan=0.0)]  # softmax is NaN on an all -inf row
    return Case(group, _values(x, mask, rows, s0, s, y), ref)


def long_row_softmax_case() -> Case:
    """softmax over two rows of 100003 (a prime: the last chunk is short), split across blocks."""
    case = softmax_case(shape=(2, 100003), name="k24_long_softmax")
    case.tags.add("split")
    return case


def long_row_argmax_case() -> Case:
    """argmax and a mean-with-epilogue over three long rows: ties and chunk order must not matter."""
    x, idx = _v("x", (3, 70001)), _v("idx", (3,), "int64")
    group = ReductionGroup("k25_long_argmax", [x], [idx], in_shape=(3, 70001), dims=(1,), reduce="argmax",
                           operand="x", result="idx", result_shape=(3,))
    return Case(group, _values(x, idx), lambda torch, t: [t["x"].argmax(1)], tags={"split"})


def long_row_mean_case() -> Case:
    """mean(x^2) + 1 over [5, 65536], the prologue value stored too."""
    shape = (5, 65536)
    x, sq, m, e = _v("x", shape), _v("sq", shape), _v("m", (5,)), _v("e", (5,))
    group = ReductionGroup("k26_long_mean", [x], [e, sq], in_shape=shape, dims=(1,), reduce="mean", operand="sq",
                           result="m", result_shape=(5,), prologue=[Op("square", ["x"], "sq")],
                           epilogue=[Op("add", ["m", 1.0], "e")])
    return Case(group, _values(x, sq, m, e), lambda torch, t: [(t["x"] ** 2).mean(1) + 1.0, t["x"] ** 2],
                tags={"split"})


def cat_case() -> Case:
    """cat([a, b, a], dim=1): a part twice, the parts of different extents along dim."""
    a, b, y = _v("a", (2, 3, 5)), _v("b", (2, 4, 5)), _v("y", (2, 10, 5))
    group = CatGroup("k27_cat", [a, b], [y], parts=["a", "b", "a"], dim=1, sizes=(3, 4, 3), result="y",
                     out_shape=y.shape)
    return Case(group, _values(a, b, y), lambda torch, t: [torch.cat([t["a"], t["b"], t["a"]], 1)], tags={"cat"})


CASES = {f.__name__.removesuffix("_case"): f for f in (
    pointwise_case, softmax_case, rmsnorm_case, column_sum_case, argmax_case, gemm_case, log_softmax_case,
    column_softmax_case, logsumexp_amax_case, amax_case, norm_all_case, bmm_case, linear_case, mm_case,
    conv2d_case, conv_transpose1d_case, depthwise_conv3d_case, max_pool_case, avg_pool3d_case, cumsum_rows_case,
    cumsum_columns_case, masked_case, float_input_case, frobenius_case, long_row_softmax_case, long_row_argmax_case,
    long_row_mean_case, cat_case, safe_softmax_case, mm_transposed_case, pool_prologue_case, avg_pool_prologue_case,
    tf32x3_case, tf32x3_batched_case)}



# --- the same groups at the other precisions (docs/builtin.md, "Precisions") ------------------

def at_precision(make: Callable[[], Case], precision: str, dtype: str = "float32") -> Callable[[], Case]:
    """`make`'s case generated at `precision`, every float tensor stored as `dtype` (a Python float stays a
    float), its group renamed apart (`<name>_<precision>`) so that one extension holds every case."""
    def made() -> Case:
        case = make()
        values = [*case.values.values(), *case.group.inputs, *case.group.outputs]
        for value in values:
            if value.dtype == "float32" and not value.scalar:
                value.dtype = dtype
        case.group.name, case.precision = f"{case.group.name}_{precision}", precision
        return case
    return made


PRECISION_CASES = {  # precision: (the tensors' dtype, the cases)
    "bf16": ("bfloat16", ("pointwise", "rmsnorm", "argmax", "gemm", "bmm", "conv2d", "max_pool", "cumsum_rows",
                          "masked", "cat", "long_row_softmax", "mm_transposed", "pool_prologue")),
    "fp16": ("float16", ("pointwise", "softmax", "linear", "conv_transpose1d", "avg_pool3d")),
    "tf32": ("float32", ("gemm", "conv2d")),  # float32 storage: only cuBLAS's and cuDNN's math differ
}
CASES.update({f"{name}_{precision}": at_precision(CASES[name], precision, dtype)
              for precision, (dtype, names) in PRECISION_CASES.items() for name in names})


def generate_all() -> dict[str, Generated]:
    out = {}
    for name, make in CASES.items():
        case = make()
        out[name] = cuda.generate(case.group, case.values, case.precision)
    return out


# --- one-pass statistics: welford reductions (docs/builtin.md, "One-pass statistics") ------

def welford_layer_norm_case() -> Case:
    """LayerNorm of x + shift over rows of 1024 (shift a Python float: 0.75 here; the GPU test also passes 1e3
    and 1e4), its statistics one welford pass, and the variance stored too."""
    n = 1024
    x, w, s, xs = _v("x", (64, n)), _v("w", (n,)), Value("shift", (), scalar=True), _v("xs", (64, n))
    mean, var, e1, rstd = _v("mean", (64, 1)), _v("var", (64, 1)), _v("e1", (64, 1)), _v("rstd", (64, 1))
    c, y1, y = _v("c", (64, n)), _v("y1", (64, n)), _v("y", (64, n))
    group = ReductionGroup("k29_welford_ln", [x, w, s], [y, var], in_shape=(64, n), dims=(1,), keepdim=True,
                           reduce="welford", operand="xs", result="mean", result_shape=(64, 1), variance="var",
                           attrs={"correction": 0.0}, prologue=[Op("add", ["x", "shift"], "xs", {"alpha": 1.0})],
                           epilogue=[Op("add", ["var", 1e-5], "e1", {"alpha": 1.0}), Op("rsqrt", ["e1"], "rstd")],
                           broadcast_epilogue=[Op("sub", ["xs", "mean"], "c", {"alpha": 1.0}),
                                               Op("mul", ["c", "rstd"], "y1"), Op("mul", ["y1", "w"], "y")])

    def ref(torch, t):
        xs = t["x"] + t["shift"]
        return [torch.nn.functional.layer_norm(xs, (n,), t["w"], eps=1e-5), xs.var(1, correction=0, keepdim=True)]
    return Case(group, _values(x, w, s, xs, mean, var, e1, rstd, c, y1, y), ref, tags={"welford"})


def long_row_welford_case() -> Case:
    """torch.var_mean of three long rows (unbiased, torch's default), split across blocks: Chan's merge of the
    chunks' partial accumulators."""
    shape = (3, 70001)
    x, mean, var = _v("x", shape), _v("mean", (3,)), _v("var", (3,))
    group = ReductionGroup("k30_long_welford", [x], [mean, var], in_shape=shape, dims=(1,), reduce="welford",
                           operand="x", result="mean", result_shape=(3,), variance="var", attrs={"correction": 1.0})
    return Case(group, _values(x, mean, var), lambda torch, t: list(torch.var_mean(t["x"], 1))[::-1],
                tags={"split", "welford"})


def column_welford_case() -> Case:
    """BatchNorm1d's statistics: a welford down the columns of [4, 300, 33] (teams SLOTS apart), rstd stored."""
    x, mean, var, e1, rstd = (_v("x", (4, 300, 33)), _v("mean", (4, 33)), _v("var", (4, 33)), _v("e1", (4, 33)),
                              _v("rstd", (4, 33)))
    group = ReductionGroup("k31_column_welford", [x], [mean, rstd], in_shape=(4, 300, 33), dims=(1,),
                           reduce="welford", operand="x", result="mean", result_shape=(4, 33), variance="var",
                           attrs={"correction": 0.0},
                           epilogue=[Op("add", ["var", 1e-5], "e1", {"alpha": 1.0}), Op("rsqrt", ["e1"], "rstd")])

    def ref(torch, t):
        var, mean = torch.var_mean(t["x"], 1, correction=0)
        return [mean, torch.rsqrt(var + 1e-5)]
    return Case(group, _values(x, mean, var, e1, rstd), ref, tags={"welford"})


def long_column_batch_norm_case() -> Case:
    """BatchNorm1d in training over a [4500, 70] GEMM output, weighted: the statistics a welford down 70 long
    columns, split across blocks (70 columns leave the last block of 32 partly idle; 4500 rows in 17 chunks, the
    last one short), and the normalisation the second pass over each block's chunk."""
    rows, cols = 4500, 70
    x, w, y = _v("x", (rows, cols)), _v("w", (1, cols)), _v("y", (rows, cols))
    mean, var, e1, rstd = _v("mean", (1, cols)), _v("var", (1, cols)), _v("e1", (1, cols)), _v("rstd", (1, cols))
    c, y1 = _v("c", (rows, cols)), _v("y1", (rows, cols))
    group = ReductionGroup("k32_long_column_bn", [x, w], [y, mean], in_shape=(rows, cols), dims=(0,), keepdim=True,
                           reduce="welford", operand="x", result="mean", result_shape=(1, cols), variance="var",
                           attrs={"correction": 0.0},
                           epilogue=[Op("add", ["var", 1e-5], "e1", {"alpha": 1.0}), Op("rsqrt", ["e1"], "rstd")],
                           broadcast_epilogue=[Op("sub", ["x", "mean"], "c", {"alpha": 1.0}),
                                               Op("mul", ["c", "rstd"], "y1"), Op("mul", ["y1", "w"], "y")])

    def ref(torch, t):
        var, mean = torch.var_mean(t["x"], 0, correction=0, keepdim=True)
        return [(t["x"] - mean) * torch.rsqrt(var + 1e-5) * t["w"], mean]
    return Case(group, _values(x, w, mean, var, e1, rstd, c, y1, y), ref, tags={"split", "welford"})


def long_column_sum_case() -> Case:
    """sum over dim 1 of [3, 5000, 40] (3 x 40 columns of 5000) plus c at the reduced shape, split across blocks
    with no second pass."""
    x, c, s, e = _v("x", (3, 5000, 40)), _v("c", (40,)), _v("s", (3, 40)), _v("e", (3, 40))
    group = ReductionGroup("k33_long_colsum", [x, c], [e], in_shape=(3, 5000, 40), dims=(1,), reduce="sum",
                           operand="x", result="s", result_shape=(3, 40), epilogue=[Op("add", ["s", "c"], "e")])
    return Case(group, _values(x, c, s, e), lambda torch, t: [t["x"].sum(1) + t["c"]], atol=1e-3, tags={"split"})


def group_norm_case() -> Case:
    """GroupNorm after a convolution's bias, as level2/21 partitions it: rows of [N, G, C/G, H x W] with a
    per-channel bias ([1, G, C/G, 1]) in the prologue and the GroupNorm weight and bias in the broadcast
    epilogue; H x W = 37 against 256-thread teams, so a team's lanes straddle the channels' runs."""
    shape, ch = (2, 3, 4, 37), (1, 3, 4, 1)
    x, b, w, beta = _v("x", shape), _v("b", ch, contiguous=False), _v("w", ch), _v("beta", ch)
    xb, c, y1, y = _v("xb", shape), _v("c", shape), _v("y1", shape), _v("y", shape)
    mean, var, e1, rstd = _v("mean", (2, 3, 1, 1)), _v("var", (2, 3, 1, 1)), _v("e1", (2, 3, 1, 1)), \
        _v("rstd", (2, 3, 1, 1))
    group = ReductionGroup("k34_group_norm", [x, b, w, beta], [y], in_shape=shape, dims=(2, 3), keepdim=True,
                           reduce="welford", operand="xb", result="mean", result_shape=(2, 3, 1, 1), variance="var",
                           attrs={"correction": 0.0}, prologue=[Op("add", ["x", "b"], "xb", {"alpha": 1.0})],
                           epilogue=[Op("add", ["var", 1e-5], "e1", {"alpha": 1.0}), Op("rsqrt", ["e1"], "rstd")],
                           broadcast_epilogue=[Op("sub", ["xb", "mean"], "c", {"alpha": 1.0}),
                                               Op("mul", ["c", "rstd"], "y1"), Op("mul", ["y1", "w"], "y2"),
                                               Op("add", ["y2", "beta"], "y", {"alpha": 1.0})])

    def ref(torch, t):
        xb = t["x"] + t["b"]
        var, mean = torch.var_mean(xb, (2, 3), correction=0, keepdim=True)
        return [(xb - mean) * torch.rsqrt(var + 1e-5) * t["w"] + t["beta"]]
    values = _values(x, b, w, beta, xb, c, y1, _v("y2", shape), y, mean, var, e1, rstd)
    return Case(group, values, ref, tags={"welford"})


def group_norm_vec_case() -> Case:
    """group_norm_case with H x W = 36: the rows (144) and the channels' runs (36) are multiples of 4, so both
    passes also get a loop of float4 loads of x and float4 stores of y."""
    case = group_norm_case()
    shape, ch = (2, 3, 4, 36), (1, 3, 4, 1)
    for value in case.values.values():
        value.shape = shape if value.shape == (2, 3, 4, 37) else value.shape
    case.group.name, case.group.in_shape = "k35_group_norm_vec", shape
    return case


CASES.update({f.__name__.removesuffix("_case"): f for f in (welford_layer_norm_case, long_row_welford_case,
                                                           column_welford_case, long_column_batch_norm_case,
                                                           long_column_sum_case, group_norm_case,
                                                           group_norm_vec_case)})


# --- tests ---------------------------------------------------------------------------------

def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    return found or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)


def _cuda_include(nvcc: str) -> Path | None:
    """The toolkit's include folder (nvcc may be a wrapper script outside the toolkit)."""
    homes = [Path(nvcc).resolve().parent.parent, Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))]
    return next((home / "include" for home in homes if (home / "include" / "cuda_runtime.h").is_file()), None)


LIBRARY_HEADERS = {"cublas": "cublas_v2.h", "cudnn": "cudnn.h", "cutlass": "cutlass/cutlass.h"}


def library_of(text: str) -> str | None:
    """The library a generated .cu includes (<cublas_v2.h>, <cudnn.h>, "cutlass/cutlass.h"), or None."""
    return next((lib for lib, header in LIBRARY_HEADERS.items() if f"<{header}>" in text or f'"{header}"' in text),
                None)


def _library_include(nvcc: str, library: str) -> Path | None:
    """A folder holding the library's header: the toolkit's, the system's, the nvidia wheel's,
    or $<LIBRARY>_INCLUDE_DIR (e.g. CUDNN_INCLUDE_DIR, for headers unpacked by hand)."""
    header = LIBRARY_HEADERS[library]
    if library == "cutlass":  # header-only, found where the build finds it
        return build_plan.cutlass_include()
    candidates = [folder for folder in (_cuda_include(nvcc), Path("/usr/include"),
                                        Path("/usr/include/x86_64-linux-gnu")) if folder]
    candidates += [Path(os.environ[f"{library.upper()}_INCLUDE_DIR"])] if f"{library.upper()}_INCLUDE_DIR" in \
        os.environ else []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += [Path(root) / "cu13" / "include", Path(root) / library / "include"]
    return next((folder for folder in candidates if (folder / header).is_file()), None)


@pytest.mark.parametrize("name", list(CASES))
def test_generated_files_follow_the_conventions(name):
    case = CASES[name]()
    made = cuda.generate(case.group, case.values)
    group = case.group
    assert made.function == group.name and made.variants
    assert f"{group.name}.cu" in made.files and f"{group.name}_binding.cpp" in made.files
    for file, text in made.files.items():
        if file.endswith(".cu"):
            assert not TORCH_HEADER.search(text), f"{file} includes a torch header"
    binding = made.files[f"{group.name}_binding.cpp"]
    assert f"REGISTER_KERNEL({group.name}, {group.name});" in binding
    assert f'extern "C" int {group.name}_launch(' in binding and f'extern "C" int {group.name}_launch(' in \
        made.files[f"{group.name}.cu"]
    for value in group.inputs:
        if value.scalar:
            assert f"double in_{value.name}" in binding  # by value: nothing to check
            continue
        for check in ("must be a CUDA tensor", f"must be {value.dtype}", f"must have shape {list(value.shape)}"):
            assert f"{group.name}: input {value.name} {check}" in binding
    assert "config must be in" in binding and "getCurrentCUDAStream()" in binding


def test_dense_inputs_are_checked_contiguous_and_strided_ones_get_strides():
    made = cuda.generate(pointwise_case().group, pointwise_case().values)
    binding = made.files["k0_pointwise_binding.cpp"]
    assert "k0_pointwise: input x must be contiguous" in binding
    assert "input xt must be contiguous" not in binding and "ks_strides(in_xt, {2, 3, 5, 7})" in binding
    assert "ks_strides(in_bias, {2, 3, 5, 7})" in binding
    assert "std::tuple<at::Tensor, at::Tensor>" in binding


def test_gemm_uses_cublas_without_tf32_in_its_own_file(monkeypatch):
    monkeypatch.setenv(build_plan.CUTLASS_ENV, "0")  # SGEMM alone, as where CUTLASS is not installed
    made = cuda.generate(gemm_case().group, gemm_case().values)
    cublas = made.files["k5_gemm_gemm.cu"]
    assert "#include <cublas_v2.h>" in cublas and "CUBLAS_DEFAULT_MATH" in cublas and "TF32" not in \
        cublas.replace("no TF32", "")
    assert "cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, 24, 48, 40, &alpha, b, 40, a, 40, &beta, c, 24)" in cublas
    assert "cublas" not in made.files["k5_gemm.cu"].lower().replace("k5_gemm_gemm.cu", "")
    assert len(made.variants) == 6  # bias in the epilogue or through beta, 3 block sizes each


@pytest.fixture
def fake_cutlass(tmp_path, monkeypatch):
    """A CUTLASS include folder as the policy looks for one (the generator only asks whether there is one)."""
    (tmp_path / "cutlass").mkdir()
    (tmp_path / "cutlass" / "cutlass.h").write_text("#pragma once\n")
    monkeypatch.setenv(build_plan.CUTLASS_ENV, str(tmp_path))
    return tmp_path


def _resized_gemm(m: int, n: int, k: int) -> Case:
    case = gemm_case()
    g = case.group
    g.m, g.n, g.k, g.out_shape = m, n, k, (m, n)
    for name, shape in (("x", (m, k)), ("w", (n, k)), ("b", (n,)), ("mm", (m, n)), ("y", (m, n))):
        case.values[name].shape = shape
    return case


def test_a_large_fp32_gemm_tries_3xtf32_tiles_first_with_sgemm_behind_them(fake_cutlass):
    case = _resized_gemm(1024, 1024, 1024)  # 2^30 multiply-adds: LARGE_GEMM
    made = cuda.generate(case.group, case.values)
    assert made.variants[0] == "CUTLASS 3xTF32 128x128x16 tile, bias in the epilogue, epilogue 256 threads/block"
    assert sum("CUTLASS 3xTF32" in v for v in made.variants) == 4 and len(made.variants) == 10
    tf32x3 = made.files["k5_gemm_gemm_tf32x3.cu"]
    assert '#include "cutlass/gemm/device/gemm_universal.h"' in tf32x3 and "OpMultiplyAddFastF32" in tf32x3
    # nn.Linear's weight [n, k] is B column-major as it lies; C row-major with ld n
    assert "float, cutlass::layout::RowMajor, float, cutlass::layout::ColumnMajor, float" in tf32x3
    assert "{1024, 1024, 1024}, 1, {alpha, beta}, a, b, c, c" in tf32x3 and ", 1024, 1024, 1024, 1024);" in tf32x3
    launch = made.files["k5_gemm.cu"]
    assert "kTile[] = {0, 1, 2, 3, -1, -1, -1, -1, -1, -1}" in launch
    # where the tile cannot run (before sm_80, misaligned), the launcher takes SGEMM instead
    assert "if (status == -1) status = k5_gemm_gemm(" in launch
    assert "#include <cublas" not in tf32x3
    # the kernels are this file's own (a swizzle type of internal linkage): two GEMM files of one layout in one
    # extension would otherwise share one kernel and CUTLASS's statics, and the second one's launch failed
    anonymous = tf32x3[tf32x3.index("namespace {"):tf32x3.index("}  // namespace")]
    assert "struct KsSwizzle : cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8> {};" in anonymous
    assert "KsSwizzle, Stages, 4, 4" in anonymous and "GemmIdentityThreadblockSwizzle<8>, Stages" not in tf32x3


def test_a_memory_bound_gemm_keeps_sgemm_first_however_large(fake_cutlass):
    """level1/9's [32768, 32] @ [32, 32768]: 2^35 multiply-adds but 16 FLOPs a byte, where 3xTF32 measured
    0.88x SGEMM."""
    case = _resized_gemm(32768, 32768, 32)
    assert cuda.generate(case.group, case.values).variants[0].startswith("cuBLAS sgemm")


def test_a_small_gemm_keeps_sgemm_first_and_tries_the_tiles_next(fake_cutlass):
    made = cuda.generate(gemm_case().group, gemm_case().values)
    assert made.variants[0].startswith("cuBLAS sgemm") and made.variants[1].startswith("CUTLASS 3xTF32 128x128x16")
    assert "kTile[] = {-1, 0, 1, 2, 3, -1, -1, -1, -1, -1}" in made.files["k5_gemm.cu"]


def test_3xtf32_is_offered_only_for_float32_math(fake_cutlass):
    for precision in ("tf32", "bf16"):
        case = CASES[f"gemm_{precision}"]()
        made = cuda.generate(case.group, case.values, case.precision)
        assert not any(f.endswith("_tf32x3.cu") for f in made.files)
        assert "kTile" not in made.files[f"k5_gemm_{precision}.cu"]


def test_without_cutlass_the_gemm_files_are_what_they_were(fake_cutlass, monkeypatch):
    """KERNELSMITH_CUTLASS=0 (or no CUTLASS installed): SGEMM alone, the launcher as before it had tiles."""
    monkeypatch.setenv(build_plan.CUTLASS_ENV, "0")
    made = cuda.generate(gemm_case().group, gemm_case().values)
    assert "kTile" not in made.files["k5_gemm.cu"] and "k5_gemm_gemm_tf32x3.cu" not in made.files
    assert "  const int status = k5_gemm_gemm(p_x, p_w, p_y, by_beta ? 1.0f : 0.0f, stream);" in \
        made.files["k5_gemm.cu"]


def test_batched_and_transposed_operands_reach_cutlass_as_they_lie(fake_cutlass):
    text = cuda.generate(bmm_case().group, bmm_case().values).files["k11_bmm_gemm_tf32x3.cu"]
    assert "GemmUniversalMode::kBatched" in text and "{17, 13, 9}, 3, {alpha, beta}" in text
    assert "153LL, 117LL, 221LL, 221LL" in text  # each batch's A (17 x 9), B (9 x 13) and C (17 x 13)
    made = cuda.generate(mm_transposed_case().group, mm_transposed_case().values)
    text = made.files["k40_mm_transposed_gemm_tf32x3.cu"]
    assert "float, cutlass::layout::ColumnMajor, float, cutlass::layout::ColumnMajor, float" in text
    assert "{19, 11, 23}, 1" in text and ", 19, 23, 11, 11);" in text  # lda 19, ldb 23: as the strides say


def test_transposed_operands_go_to_cublas_as_they_lie_and_their_strides_are_checked():
    made = cuda.generate(mm_transposed_case().group, mm_transposed_case().values)
    assert ("cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_T, 11, 19, 23, &alpha, b, 23, a, 19, &beta, c, 11)"
            in made.files["k40_mm_transposed_gemm.cu"])
    binding = made.files["k40_mm_transposed_binding.cpp"]
    assert "k40_mm_transposed: input a must have strides [1, 19]" in binding and "must be contiguous" not in binding
    ex = cuda.generate(mm_transposed_case().group, mm_transposed_case().values, "tf32")
    assert "cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_T, 11, 19, 23, &alpha, b, CUDA_R_32F, 23, a, CUDA_R_32F, 19" \
        in ex.files["k40_mm_transposed_gemm.cu"]


def test_argmax_result_is_int64():
    made = cuda.generate(argmax_case().group, argmax_case().values)
    assert "at::kLong" in made.files["k4_argmax_binding.cpp"]
    assert "int64_t* p_idx" in made.files["k4_argmax.cu"]


def test_out_of_scope_groups_raise_value_error():
    case = pointwise_case()
    case.values["t3"] = Value("t3", (2, 3, 5, 7), "float64")  # (16-bit floats are stored; float64 is not)
    with pytest.raises(ValueError, match="unsupported"):
        cuda.generate(case.group, case.values)
    arg = argmax_case()
    arg.group.epilogue = [Op("mul", ["idx", 2.0], "z")]
    arg.values["z"] = Value("z", (6, 5), "int64")
    with pytest.raises(ValueError, match="unsupported"):
        cuda.generate(arg.group, arg.values)


def _write_sources(folder: Path) -> tuple[list[str], dict[str, list[str]]]:
    """Write every case's files; return the plain .cu names, and those of each library."""
    plain, by_library = [], {library: [] for library in LIBRARY_HEADERS}
    for made in generate_all().values():
        for file, text in made.files.items():
            (folder / file).write_text(text)
            if file.endswith(".cu"):
                library = library_of(text)
                (by_library[library] if library else plain).append(file)
    return sorted(plain), {lib: sorted(files) for lib, files in by_library.items()}


@pytest.mark.slow_build
@pytest.mark.parametrize("half", [0, 1])
def test_generated_kernels_compile(tmp_path, half):
    """The kernels without cuBLAS, in two nvcc calls (one per CI core under pytest -n 2)."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    plain, _ = _write_sources(tmp_path)
    _compile(nvcc, plain[half::2], tmp_path)


@pytest.mark.slow_build
@pytest.mark.parametrize("library", list(LIBRARY_HEADERS))
def test_generated_library_files_compile(tmp_path, library):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    include = _library_include(nvcc, library)
    _, by_library = _write_sources(tmp_path)
    if include is None:
        pytest.skip(f"no {LIBRARY_HEADERS[library]} here: {', '.join(by_library[library])} compile in the GPU test")
    assert by_library[library], f"no generated file uses {library}"
    files = _one_per_kind(by_library[library], tmp_path) if library == "cutlass" else by_library[library]
    _compile(nvcc, files, tmp_path, ["-I", str(include), "--expt-relaxed-constexpr"])


KINDS_COMPILED = {("RowMajor", "ColumnMajor"), ("ColumnMajor", "ColumnMajor")}


def _one_per_kind(files: list[str], folder: Path) -> list[str]:
    """The 3xTF32 files of two operand-layout pairs: nn.Linear's (A row-major, B column-major) and both operands
    transposed, so each operand is compiled in both layouts. Each file takes nvcc 30-40 s alone (four tiles of
    CUTLASS templates) and several minutes beside the other CI worker; the rest differ only in numbers and in a
    layout pair, and every one is built by the GPU test."""
    kinds = {}
    for file in files:
        text = (folder / file).read_text()
        pair = re.search(r"GemmUniversal<\s*float, cutlass::layout::(\w+), float, cutlass::layout::(\w+)", text).groups()
        if pair in KINDS_COMPILED:
            kinds.setdefault(pair, file)
    assert set(kinds) == KINDS_COMPILED, f"the cases no longer make both layout pairs: {sorted(kinds)}"
    return sorted(kinds.values())


def test_convolution_uses_cudnn_in_true_fp32_in_its_own_file():
    made = cuda.generate(conv2d_case().group, conv2d_case().values)
    cudnn = made.files["k14_conv2d_conv.cu"]
    assert "#include <cudnn.h>" in cudnn and "CUDNN_FMA_MATH" in cudnn and "TENSOR_OP" not in cudnn
    assert "cudnnSetConvolutionGroupCount(c.conv, 2)" in cudnn and "cudnnConvolutionForward(" in cudnn
    assert "cudnn" not in made.files["k14_conv2d.cu"].lower().replace("k14_conv2d_conv.cu", "")
    binding = made.files["k14_conv2d_binding.cpp"]
    assert "k14_conv2d_conv_workspace((int)config, &workspace_bytes)" in binding and "at::kByte" in binding
    assert len(made.variants) == 4  # the first four algorithms of cuDNN's heuristic


def test_transposed_convolution_is_cudnns_backward_data_pass_over_a_lifted_1d():
    made = cuda.generate(conv_transpose1d_case().group, conv_transpose1d_case().values)
    cudnn = made.files["k15_convt1d_conv.cu"]
    assert "cudnnConvolutionBackwardData(" in cudnn and "cudnnConvolutionForward(" not in cudnn
    assert "x_dims[] = {2, 4, 1, 9}, y_dims[] = {2, 3, 1, 18}, w_dims[] = {4, 3, 1, 3}" in cudnn
    assert "_epilogue" not in made.files["k15_convt1d.cu"]  # cuDNN writes the output: nothing to fuse


# A stand-in for the one header a CPU-only torch lacks below c10/cuda: enough for a syntax check.
STUB_HEADERS = {"c10/cuda/impl/cuda_cmake_macros.h": "#pragma once\n"}


@pytest.mark.slow_build
def test_generated_bindings_compile(tmp_path):
    """Every binding, g++ -fsyntax-only in one translation unit (each in its own namespace, so
    the torch headers are parsed once): about 30 s."""
    compiler, nvcc = shutil.which("g++") or shutil.which("c++"), _nvcc()
    torch_spec = importlib.util.find_spec("torch")
    python_include = Path(sysconfig.get_paths()["include"])
    cuda_include = _cuda_include(nvcc) if nvcc else None
    if not (compiler and cuda_include and torch_spec and (python_include / "Python.h").is_file()):
        pytest.skip("needs g++, the CUDA toolkit's headers, torch's headers and Python.h")
    _write_sources(tmp_path)
    for rel, text in STUB_HEADERS.items():
        (tmp_path / "stubs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "stubs" / rel).write_text(text)
    bindings = sorted(p.name for p in tmp_path.glob("*_binding.cpp"))
    # light bindings: no <torch/extension.h> in the unit, so one that needs it fails here
    unit = [f"#include {h}" for h in ('"binding_light.h"', "<c10/cuda/CUDAGuard.h>", "<c10/cuda/CUDAStream.h>",
                                      "<cuda_runtime.h>", "<cuda_bf16.h>", "<cuda_fp16.h>")]
    unit += [f'namespace ks_{name.removesuffix(".cpp")} {{\n#include "{name}"\n}}' for name in bindings]
    (tmp_path / "all_bindings.cpp").write_text("\n".join(unit) + "\n")
    torch_include = Path(torch_spec.origin).parent / "include"
    includes = [tmp_path / "stubs", python_include, torch_include, torch_include / "torch" / "csrc" / "api" / "include",
                cuda_include, Path(cuda.__file__).parents[2] / "templates"]
    cmd = [compiler, "-std=c++20", "-fsyntax-only", "-DTORCH_EXTENSION_NAME=ks_bindings",
           *[f"-I{folder}" for folder in includes], "all_bindings.cpp"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert proc.returncode == 0, "\n".join(errors[:20]) or proc.stderr[-4000:]


# torch's cpp_extension compiles .cu files with these: no implicit conversions of __half and __nv_bfloat16
NO_HALF_CONVERSIONS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                       "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]


def _compile(nvcc: str, files: list[str], cwd: Path, extra: list[str] = ()) -> None:
    cmd = [nvcc, "-c", "-arch=sm_90", "-std=c++17", "-O3", *NO_HALF_CONVERSIONS, *extra, *files]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"nvcc failed:\n{proc.stdout}\n{proc.stderr}"
    assert "warning" not in proc.stderr.lower(), proc.stderr


def test_few_long_rows_are_split_across_blocks_with_a_whole_row_fallback():
    made = cuda.generate(frobenius_case().group, frobenius_case().values)
    assert made.variants[:2] == ["rows split across blocks, 256 threads per chunk",
                                 "rows split across blocks, 512 threads per chunk"]
    assert made.variants[2:] == ["512 threads per row"]  # kept: the search falls back to it if a split fails
    source = made.files["k23_frobenius.cu"]
    # 76800 elements in 18 chunks of at least 4096, and the division runs in every chunk's block
    assert "kChunks = 18LL, kChunk = 4267LL, kFinishChunks = 18LL" in source
    default = source[source.index("    default:"):source.index("break;", source.index("    default:"))]
    assert "k23_frobenius_split_partial<256, 1, true>" in default and "k23_frobenius_split_finish<256, 1, true>" in default
    assert "if (lane == 0 && chunk == 0)" in source  # the norm is written once, not once per chunk


def test_few_long_columns_are_split_across_blocks_with_the_whole_column_variants_kept():
    made = cuda.generate(long_column_batch_norm_case().group, long_column_batch_norm_case().values)
    assert made.variants[:2] == ["columns split across blocks, 8 threads per column's chunk, 32 columns per block",
                                 "columns split across blocks, 16 threads per column's chunk, 32 columns per block"]
    assert made.variants[2] == "8 threads per reduced value, 32 values per block" and len(made.variants) == 7
    source = made.files["k32_long_column_bn.cu"]
    # 70 columns in 3 blocks' worth; 4500 rows in chunks of at least 256: 17 of 265, each normalised where it lies
    assert "kChunks = 17LL, kChunk = 265LL, kFinishChunks = 17LL" in source
    default = source[source.index("    default:"):source.index("break;", source.index("    default:"))]
    assert "k32_long_column_bn_split_partial<8, 32, false><<<(unsigned)(((kSlots + 31) / 32) * kChunks), 256" in default
    assert "if (lane == 0 && chunk == 0)" in source  # the mean is written once, not once per chunk


def test_many_or_short_columns_keep_one_team_per_column():
    for case in (column_welford_case(), column_sum_case(), argmax_case()):
        made = cuda.generate(case.group, case.values)
        assert not any("split" in v for v in made.variants), case.group.name


def test_a_split_without_a_second_pass_finishes_in_one_block_per_row():
    made = cuda.generate(long_row_mean_case().group, long_row_mean_case().values)
    assert "kChunks = 16LL, kChunk = 4096LL, kFinishChunks = 1LL" in made.files["k26_long_mean.cu"]


def test_many_or_short_rows_keep_one_team_per_row():
    empty_batch = softmax_case(shape=(0, 100003), name="k1_empty")  # no rows at all: nothing to split
    for case in (softmax_case(), softmax_case(shape=(65, 70000), name="k1_many"), norm_all_case(), empty_batch):
        made = cuda.generate(case.group, case.values)
        assert not any("split" in v for v in made.variants)
        assert "_split_partial" not in "".join(made.files.values())


def test_broadcast_reads_and_window_indices_decode_in_32_bits_where_the_space_fits():
    """A bias [C, 1, 1] read in [N, C, H, W] divides the flat index once per dim on every element: below 2^32
    elements those are 32-bit unsigned divisions by constants (a multiply-high and a shift), above it 64-bit."""
    from kernelsmith.compiler.cstyle.access import access_for
    from kernelsmith.compiler.cstyle.window import decode

    small = access_for((16, 1, 1), True, (8, 16, 32, 32)).offset_expr("flat", "s")
    assert small == "((((((unsigned)flat) / 32u) / 32u) % 16u) * s[1])"
    large = access_for((16, 1, 1), True, (4097, 16, 256, 256)).offset_expr("flat", "s")  # past 2^32 elements
    assert large == "((((flat / 256LL) / 256LL) % 16LL) * s[1])" and "unsigned" not in large
    assert decode("flat", (64, 192, 1, 65523))[0] == "const unsigned ks_flat = (unsigned)flat;"
    assert "flat % 655230LL" in decode("flat", (64, 192, 1, 655230))[0]  # 8.05e9 outputs: 64 bits


def test_inputs_constant_along_a_channel_load_once_per_channel_not_once_per_element():
    """GroupNorm's per-channel inputs (a strided bias, the weight and beta) are constant along each channel's
    H x W run of the row: both passes walk the row a run at a time and load them at the run's first element,
    and the inner loop loads only the dense operand (level2/21's kernel spent its time decoding their offsets)."""
    source = cuda.generate(group_norm_case().group, group_norm_case().values).files["k34_group_norm.cu"]
    assert source.count("seg += 37LL") == 2
    for name in ("p_b", "p_w", "p_beta"):
        loads = [line for line in source.splitlines() if f"&{name}[" in line]
        assert loads and all("seg_flat" in line for line in loads), loads
    inner = source.split("r < seg + 37LL; r += TEAM) {")[1].split("}")[0]
    assert "p_x[flat]" in inner and "p_b[" not in inner


def test_rows_of_a_multiple_of_four_get_float4_loops_that_the_launcher_takes_only_when_aligned():
    """Both passes of the H x W = 36 GroupNorm: x loaded and y stored 16 bytes at a time, the per-channel
    inputs still once per run; each whole-row variant launches VEC 4 only where x and y are 16-byte aligned."""
    case = group_norm_vec_case()
    source = cuda.generate(case.group, case.values).files["k35_group_norm_vec.cu"]
    assert source.count("if constexpr (VEC == 4)") == 2
    assert source.count("reinterpret_cast<const float4*>(p_x) + (flat4 >> 2)") == 2
    assert source.count("reinterpret_cast<float4*>(p_y)[(flat4 >> 2)] = o4_y;") == 1
    assert source.count("r4 < seg + 36LL; r4 += 4 * TEAM") == 2
    launches = [line.strip() for line in source.split("switch (config)")[1].splitlines() if "<<<" in line]
    assert launches and len(launches) % 2 == 0
    for aligned, fallback in zip(launches[::2], launches[1::2]):
        assert aligned.startswith("if (ks_aligned(p_x) && ks_aligned(p_y)) ") and ", 4><<<" in aligned
        assert fallback.startswith("else ") and ", 1><<<" in fallback


def test_rows_whose_length_is_not_a_multiple_of_four_keep_scalar_loops_only():
    source = cuda.generate(group_norm_case().group, group_norm_case().values).files["k34_group_norm.cu"]
    assert "VEC" not in source and "float4" not in source


def test_long_rows_try_a_block_of_1024_threads_first():
    """level2/21's GroupNorm rows of 258,064: 1,024 threads a row was 1.27x faster than 256 on an H100."""
    shape = (8, 4, 16384)
    x, s = _v("x", shape), _v("s", (8, 4))
    group = ReductionGroup("k36_long_rows", [x], [s], in_shape=shape, dims=(2,), reduce="sum", operand="x",
                           result="s", result_shape=(8, 4))
    made = cuda.generate(group, _values(x, s))
    assert made.variants[0] == "1024 threads per row"
    assert "k36_long_rows_reduce<1024, 1, true, 4><<<" in made.files["k36_long_rows.cu"]


def test_a_pass_that_reads_no_per_channel_input_keeps_the_flat_loop():
    """Only the second pass reads the GroupNorm weight: the statistics pass keeps the flat loop (a run loop
    there would declare seg_flat and never read it: an nvcc warning, and work for nothing)."""
    case = group_norm_case()
    case.group.inputs = [v for v in case.group.inputs if v.name != "b"]
    case.group.prologue = [Op("mul", ["x", 2.0], "xb")]
    source = cuda.generate(case.group, case.values).files["k34_group_norm.cu"]
    assert source.count("seg += 37LL") == 1 and source.count("const int64_t seg_flat") == 1
    assert "for (int64_t r = lane; r < kSize; r += TEAM)" in source


def test_a_row_whose_inputs_vary_along_it_keeps_the_flat_loop():
    """RMSNorm's weight [n] varies along the whole reduced row: no run to hoist it over."""
    source = cuda.generate(rmsnorm_case().group, rmsnorm_case().values).files["k2_rmsnorm.cu"]
    assert "seg_flat" not in source and "for (int64_t r = lane; r < kSize; r += TEAM)" in source
