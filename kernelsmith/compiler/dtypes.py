"""The graph's dtype names, by torch dtype."""

from __future__ import annotations

import torch

DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16",
          torch.int64: "int64", torch.int32: "int32", torch.bool: "bool", torch.float64: "float64"}


def dtype_name(dtype: torch.dtype) -> str:
    """Its name in the graph; a dtype the compiler has no name for keeps torch's ("torch.uint8")."""
    return DTYPES.get(dtype, str(dtype))

# ATen's scalar types by graph dtype name, as the bindings of both targets check and allocate them
ATEN_DTYPES = {"float32": "at::kFloat", "int64": "at::kLong", "bool": "at::kBool", "bfloat16": "at::kBFloat16",
               "float16": "at::kHalf"}

# Floating values a kernel stores, in any of these dtypes; it computes and accumulates in float.
FLOATS = ("float32", "bfloat16", "float16")
HALVES = ("bfloat16", "float16")  # 16-bit storage: loaded into float, rounded to nearest when stored

# What the harness runs Model and its floating inputs at, per precision (harness/loading.py's DTYPES, which
# the compiler cannot import: it runs in the parent, the harness in the workers; tests/test_builtin_precisions.py
# checks that the two agree). fp32 and tf32 keep float32.
AT_PRECISION = {"bf16": torch.bfloat16, "fp16": torch.float16}
