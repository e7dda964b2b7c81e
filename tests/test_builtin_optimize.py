"""End to end with no API key: `kernelsmith optimize` falls back to the built-in policy, which
generates C++ kernels for the CPU, verifies, profiles, searches and commits, like any backend."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith.gitops import KernelRepo
from kernelsmith.session.reader import read_events, session_paths

DATA = Path(__file__).parent / "data" / "builtin"
NO_KEYS = {k: v for k, v in os.environ.items()
           if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")
           and not k.startswith("KERNELSMITH_")}


def optimize(task: Path, workdir: Path, *flags) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelsmith.cli", "optimize", str(task), "--workdir", str(workdir),
                           "--device", "cpu", "--json", *flags], capture_output=True, text=True, timeout=1200,
                          env={**NO_KEYS, "KERNELSMITH_TRIALS": "2"})  # 2 trials: CI has 2 cores


def events_of(workdir: Path) -> list[dict]:
    (path,) = list(session_paths(workdir))
    return list(read_events(path))


@pytest.mark.parametrize("task, max_turns, kernel", [
    ("pointwise.py", "4", "k0_pointwise"),  # plan, profile, one other variant, finish
    ("reduction.py", "3", "k0_reduction"),  # plan, profile, finish
    ("matmul_epilogue.py", "3", "k0_gemm"),
    ("conv_relu.py", "3", "k0_conv"),
])
def test_optimize_with_no_api_key_commits_a_verified_generated_kernel(tmp_path, task, max_turns, kernel):
    workdir = tmp_path / "wd"
    proc = optimize(DATA / task, workdir, "--max-turns", max_turns)
    assert "notice: no API key configured: using the built-in offline policy" in proc.stderr
    events = events_of(workdir)
    best = events[-1]["summary"]["best"]  # exit 0 only when it beat eager; a slower verified kernel is still committed
    assert best and proc.returncode == (0 if best["speedup_vs_eager"] > 1.0 else 1), proc.stderr[-3000:]
    assert events[0]["config"]["backend"] == "builtin"
    assert events[-1]["kind"] == "session_end" and events[-1]["reason"] == "finish"
    profiles = [e["result"] for e in events if e["kind"] == "eval_result" and e["tool"] == "profile"]
    assert profiles and all(p["correct"] and not p["violations"] for p in profiles)
    commits = KernelRepo(workdir).kernel_commits()
    assert commits, "a verified kernel must be committed"
    source = (workdir / "model_new.py").read_text()
    assert f"ext.{kernel}(" in source and (workdir / "kernels" / f"{kernel}.cpp").is_file()
    assert not list((workdir / "kernels").glob("example_scale*"))
    if task == "pointwise.py":
        assert len(profiles) == 2  # the first version and one other launch variant
        best = events[-1]["summary"]["best"]
        assert best["sha"] == commits[0]["sha"]  # the newest commit is the session's best
        # the workdir is left at the fastest variant measured, which the search text names
        configs = json.loads(source.split("CONFIG = ")[1].split("  #")[0])
        assert configs in ([0], [1], [2])


def test_an_unsupported_task_is_reported_and_nothing_is_committed(tmp_path):
    task = tmp_path / "cumprod.py"
    task.write_text("import torch\nimport torch.nn as nn\n\n"
                    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.dim = 1\n\n    def forward(self, x):\n        return torch.cumprod(x, self.dim)\n\n"
                    "def get_inputs():\n    return [torch.randn(2, 3, 16, 16)]\n\n"
                    "def get_init_inputs():\n    return []\n")
    workdir = tmp_path / "wd"
    proc = optimize(task, workdir, "--backend", "builtin")
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "no API key configured" not in proc.stderr  # the user chose the backend: no notice
    events = events_of(workdir)
    finish = [e for e in events if e["kind"] == "model_turn"][-1]["message"]
    assert "cumprod" in finish["content"] and "not supported" in finish["content"]
    assert not KernelRepo(workdir).kernel_commits()
    assert not [e for e in events if e["kind"] == "eval_result"]  # nothing was faked or run
