"""Tensors forward makes from no input (a causal mask from ones().triu(), an arange, a full of a shape, the 0 of
logsigmoid's decomposition): the built-in policy makes them once in ModelNew's constructor (passes/constants.py)
instead of refusing the task, as it did for 3 of the first 11 synthesized tasks it was benchmarked on."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kernelsmith.compiler.capture import capture
from kernelsmith.compiler.graph import CaptureError
from kernelsmith.compiler.pipeline import build_plan
from plan_runner import load_module

ATTENTION = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dim // self.heads)
        mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
        ramp = torch.arange(seq, device=x.device, dtype=x.dtype).unsqueeze(-1) * 0.01
        return F.logsigmoid(y + {extra})


def get_inputs():
    return [torch.randn(2, 16, 32)]


def get_init_inputs():
    return []
"""


def _task(folder: Path, extra: str = "ramp") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.py"
    path.write_text(ATTENTION.replace("{extra}", extra))
    return path


def test_the_graph_keeps_no_maker_and_forward_reads_the_constants_as_buffers(tmp_path):
    graph = capture(_task(tmp_path))
    targets = {n.target.split(".")[0] for n in graph.nodes}
    assert not targets & {"full", "arange", "logical_and", "ge"}, targets
    made = [p for p in graph.params if p.source.startswith("self._ks_const_")]
    assert [(p.shape, p.dtype) for p in made] == [((16, 16), "bool"), ((16, 1), "float32")]


def test_the_constructor_lines_make_what_forward_made(tmp_path):
    """Run as ModelNew's constructor runs them: the mask is triu(1) of ones, the ramp arange * 0.01."""
    graph = capture(_task(tmp_path))
    module = torch.nn.Module()
    exec("\n".join(graph.init), {"torch": torch, "self": module})
    buffers = dict(module.named_buffers())
    assert torch.equal(buffers["_ks_const_logical_and"], torch.ones(16, 16, dtype=torch.bool).triu(1))
    torch.testing.assert_close(buffers["_ks_const_mul"], torch.arange(16.0).unsqueeze(-1) * 0.01, rtol=0, atol=0)
    assert module.state_dict() == {}  # not persistent: the harness's weights never carry them


def test_a_random_tensor_made_in_forward_is_not_hoisted_and_stays_refused(tmp_path):
    built = build_plan(_task(tmp_path, extra="torch.randn(seq, 1, device=x.device)"), "cpu", "fp32")
    assert built.unsupported and "randn" in built.unsupported[0]
    assert all("randn" not in line for line in built.plan.init)


def test_forward_returning_a_constant_it_made_is_refused_in_one_line(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                return x * 2, torch.arange(4.0)
        def get_inputs():
            return [torch.randn(4)]
        def get_init_inputs():
            return []
    """))
    with pytest.raises(CaptureError, match="returns a constant tensor"):
        capture(path)


def test_at_bf16_the_cast_comes_before_the_constants_it_must_not_round(tmp_path):
    source = build_plan(_task(tmp_path), "cpu", "bf16").model_new([0] * 9)
    cast, first = source.index("self.to(torch.bfloat16)"), source.index("self.register_buffer(")
    assert cast < first


def test_the_generated_model_matches_torch_on_the_cpu_with_the_weights_loaded(tmp_path, monkeypatch):
    """The whole path a session takes: kernels/ built, model_new.py imported, Model's weights loaded."""
    built = build_plan(_task(tmp_path), "cpu", "fp32")
    assert not built.unsupported, built.unsupported
    (tmp_path / "kernels").mkdir()
    for name, text in built.files.items():
        (tmp_path / "kernels" / name).write_text(text)
    (tmp_path / "model_new.py").write_text(built.model_new([0] * len(built.variants)))
    monkeypatch.setenv("KERNELSMITH_DEVICE", "cpu")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "model", raising=False)
    model = load_module(tmp_path / "model.py", "model")
    new = load_module(tmp_path / "model_new.py", "ks_constants_model_new")
    torch.manual_seed(0)
    reference, candidate = model.Model(), new.ModelNew()
    candidate.load_state_dict(reference.state_dict())  # strict: the constants add no key
    x = torch.randn(2, 16, 32)
    torch.testing.assert_close(candidate(x), reference(x), rtol=1e-5, atol=1e-6)
