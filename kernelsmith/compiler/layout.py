"""Layouts are the generated code's, not eager's: a kernel writes its outputs dense, and a view
of one is as contiguous as that view of a dense tensor (eager's `(x.t() * 2).t()` is
contiguous, ours is not; a binding would otherwise refuse it on every call). A view is replayed
on a dense meta tensor from its data (ir.View), never from Python text."""

from __future__ import annotations

import torch

from kernelsmith.compiler.ir import Plan, ViewStep


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
