"""Layouts are the generated code's, not eager's: a kernel writes its outputs dense, and a view
of one is as contiguous as that view of a dense tensor (eager's `(x.t() * 2).t()` is
contiguous, ours is not; a binding would otherwise refuse it on every call). A view is replayed
on a dense meta tensor from its data (ir.View), never from Python text.

A GEMM reads a view's memory as it is when its strides are a matrix layout cuBLAS takes
(`matrix_layout`): a transposed view, rows a leading dimension apart, one stride between the
batch's matrices (0 for an expanded operand)."""

from __future__ import annotations

import torch

from kernelsmith.compiler.ir import MatrixLayout, Plan, ViewStep


def contiguous(plan: Plan, name: str) -> bool:
    """Whether the value `name` (made by a step of `plan`) is contiguous as the generated forward lays it out."""
    if not isinstance(plan.steps[plan.owner[name]], ViewStep):
        return True  # a kernel writes its outputs dense
    try:
        return _dense_layout(plan, name).is_contiguous()
    except Exception:  # noqa: BLE001  (a view meta tensors cannot replay: read it through strides)
        return False


def _dense_layout(plan: Plan, name: str) -> torch.Tensor:
    step = plan.steps[plan.owner[name]]
    if isinstance(step, ViewStep):
        return step.view.apply(_dense_layout(plan, step.source))
    return torch.empty(plan.values[name].shape, device="meta")


def strides(plan: Plan, name: str) -> tuple[int, ...] | None:
    """The strides of `name` as the generated forward lays it out (a view of an input or parameter
    included); None when meta tensors cannot replay its view."""
    views = {step.out.name: step for step in [*plan.prelude, *plan.steps] if isinstance(step, ViewStep)}
    try:
        return tuple(_replayed(plan, views, name).stride())
    except Exception:  # noqa: BLE001  (as in contiguous: such a view is copied dense)
        return None


def _replayed(plan: Plan, views: dict[str, ViewStep], name: str) -> torch.Tensor:
    if name in views:
        return views[name].view.apply(_replayed(plan, views, views[name].source))
    return torch.empty(plan.values[name].shape, device="meta")


def matrix_layout(shape: tuple[int, ...], value_strides: tuple[int, ...] | None) -> MatrixLayout | None:
    """How cuBLAS reads a [rows, cols] matrix or a [batch, rows, cols] batch with these strides, or None
    when it cannot (neither dim of unit stride, rows that overlap, a batch over several dims)."""
    if value_strides is None or len(shape) not in (2, 3):
        return None
    *batch, rows, cols = shape
    *batch_stride, row_stride, col_stride = value_strides
    batch_stride = batch_stride[0] if batch and batch[0] > 1 else 0
    ld = _leading_dimension(rows, cols, row_stride, col_stride)
    if ld is not None:
        return MatrixLayout(False, ld, batch_stride, tuple(value_strides))
    ld = _leading_dimension(cols, rows, col_stride, row_stride)
    return None if ld is None else MatrixLayout(True, ld, batch_stride, tuple(value_strides))


def _leading_dimension(rows: int, cols: int, row_stride: int, col_stride: int) -> int | None:
    """The leading dimension of a row-major matrix with these strides (at least cols, as cuBLAS wants), or None."""
    if cols > 1 and col_stride != 1:
        return None
    if rows > 1 and row_stride < max(cols, 1):
        return None
    return row_stride if rows > 1 else max(cols, 1)
