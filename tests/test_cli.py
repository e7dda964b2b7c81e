"""The CLI as a user runs it: real subprocesses, exit codes, JSON, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HONEST

CLI = [sys.executable, "-m", "kernelsmith.cli"]
EVAL_KEYS = {"correct", "violations", "speedup_vs_eager", "speedup_vs_compile", "reward", "timings_ms",
             "device", "harness_version"}


def ks(*args, cwd=None, timeout=600):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def assert_one_line_error(proc, code=2):
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr


def test_eval_json_honest_candidate(task_dir, candidate):
    proc = ks("eval", task_dir / "model.py", candidate(HONEST), "--device", "cpu", "--min-runs", "10", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert EVAL_KEYS <= result.keys()
    assert result["correct"] is True and result["violations"] == []
    assert result["speedup_vs_eager"] > 0 and result["speedup_vs_compile"] is None  # compile skipped on the CPU
    assert result["reward"] in (1.0, 2.0)


def test_eval_rejected_candidate_exits_1(task_dir, candidate):
    cheat = candidate('''
        class ModelNew(Base):
            def forward(self, x):
                return x * 2.0 + self.bias
    ''')
    proc = ks("eval", task_dir / "model.py", cheat, "--device", "cpu", "--no-profile", "--json")
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["correct"] is True and result["reward"] == -1 and result["violations"]


def test_eval_human_output(task_dir, candidate):
    proc = ks("eval", task_dir / "model.py", candidate(HONEST), "--device", "cpu", "--min-runs", "10")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "correct" in proc.stdout and "speed-up vs eager" in proc.stdout


@pytest.mark.parametrize("args", [
    ["eval", "/no/such/model.py", "/no/such/model_new.py"],
    ["eval", "{task}", "{task}", "--precision", "fp8"],
    ["eval", "{task}", "{task}", "--device", "tpu"],
    ["eval", "{notask}", "{task}"],
    ["init", "/no/such/file.py", "--workdir", "{tmp}/wd"],
    ["init", "{task}:Nope", "--workdir", "{tmp}/wd", "--input", "float32[4]"],
    ["init", "{task}", "--workdir", "{tmp}/wd", "--input", "float32[4"],
    ["verify", "{tmp}"],
    ["eval", "{task}", "{task}", "--trials", "0"],
])
def test_bad_input_is_one_line_and_exit_2(args, task_dir, tmp_path):
    (tmp_path / "notask.py").write_text("x = 1\n")
    subs = {"{task}": str(task_dir / "model.py"), "{notask}": str(tmp_path / "notask.py"), "{tmp}": str(tmp_path)}
    filled = [a for a in args]
    for i, arg in enumerate(filled):
        for key, value in subs.items():
            arg = arg.replace(key, value)
        filled[i] = arg
    assert_one_line_error(ks(*filled))


def test_unknown_option_is_a_usage_error(task_dir):
    proc = ks("eval", task_dir / "model.py", task_dir / "model.py", "--frobnicate")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_doctor_json(tmp_path):
    proc = ks("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert checks["torch"]["ok"] and "ninja" in checks and "git" in checks
    missing_required = [c for c in checks.values() if c["required"] and not c["ok"]]
    assert proc.returncode == (1 if missing_required else 0)


def test_doctor_reports_cutlass_as_optional_and_where_it_is(tmp_path, monkeypatch):
    from kernelsmith import doctor

    (tmp_path / "cutlass").mkdir()
    (tmp_path / "cutlass" / "cutlass.h").write_text("")
    monkeypatch.setenv("KERNELSMITH_CUTLASS", str(tmp_path))
    found = doctor.check_cutlass()
    assert found.ok and str(tmp_path) in found.detail
    monkeypatch.setenv("KERNELSMITH_CUTLASS", "0")
    missing = doctor.check_cutlass()
    assert not missing.ok and not missing.required and "nvidia-cutlass" in missing.fix


def test_init_user_module_with_input_specs(tmp_path):
    user = tmp_path / "net.py"
    user.write_text('''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, n, scale):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
        self.scale = scale

    def forward(self, x, idx):
        return (x * self.w).sum(-1) * self.scale + idx.float()
''')
    proc = ks("init", f"{user}:Net", "--workdir", tmp_path / "wd", "--device", "cpu",
              "--input", "float32[8,16]", "--input", "int64[8]{0,4}", "--init-args", "[16, 0.5]")
    assert proc.returncode == 0, proc.stderr
    assert "float32[8, 16]" in proc.stdout and "float32[8]" in proc.stdout
    model = (tmp_path / "wd" / "model.py").read_text()
    assert "Model = Net" in model and "def get_inputs" in model


def test_degenerate_task_warns(tmp_path):
    task = tmp_path / "zero.py"
    task.write_text('''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 0.0


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
''')
    proc = ks("check", task, "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert "near_zero" in report["flags"]


@pytest.mark.slow_build
def test_init_compile_verify_on_the_cpu(tmp_path, task_dir):
    """The whole workdir loop with the worked example: one real torch-extension build."""
    task = Path(__file__).parent / "data" / "triple_session" / "triple.py"  # y = 3 x on a (33, 129) input
    workdir = tmp_path / "wd"
    assert ks("init", task, "--workdir", workdir, "--device", "cpu").returncode == 0
    unwritten = ks("verify", workdir, "--json")
    assert unwritten.returncode == 1 and "not written yet" in json.loads(unwritten.stdout)["error"]
    text = (workdir / "model_new.py").read_text()
    (workdir / "model_new.py").write_text(text.replace(
        'raise NotImplementedError("ModelNew.forward is not written yet: write kernels in kernels/ and call them here")',
        "return ext.example_scale(inputs[0], 3.0, 0)"))
    built = ks("compile", workdir, "--json")
    assert built.returncode == 0, built.stdout + built.stderr
    again = json.loads(ks("compile", workdir, "--json").stdout)
    assert again["cached"] is True
    verified = ks("verify", workdir, "--json")
    assert verified.returncode == 0, verified.stdout
    result = json.loads(verified.stdout)
    assert result["correct"] and result["violations"] == [] and result["build"]["cached"]
    profiled = ks("profile", workdir, "--min-runs", "10", "--json")
    assert profiled.returncode == 0, profiled.stdout
    timing = json.loads(profiled.stdout)
    assert timing["timings_ms"]["candidate"] > 0 and timing["speedup_vs_eager"] > 0 and timing["reward"] >= 1
    # the wrappers in the workdir call the same harness
    wrapper = subprocess.run([sys.executable, "verify.py", "--json"], cwd=workdir, capture_output=True, text=True)
    assert wrapper.returncode == 0 and json.loads(wrapper.stdout)["correct"]
    # editing fixed infrastructure is a violation, even though the build ignores the edit
    os.chmod(workdir / "binding.cpp", 0o644)
    (workdir / "binding.cpp").write_text((workdir / "binding.cpp").read_text() + "\n// tweak\n")
    tampered = ks("verify", workdir, "--json")
    assert tampered.returncode == 1
    assert any("binding.cpp" in v for v in json.loads(tampered.stdout)["violations"])


@pytest.mark.parametrize("name", ["[/bold]odd", "[red]x", "shape [4096, 2048]"])
def test_an_error_about_a_path_with_brackets_prints_the_path_as_it_is(tmp_path, name):
    """Error text is text: a closing tag in a path crashed the error printer with a traceback (exit 1), and an
    opening one was eaten, so the error named another path than the one given."""
    missing = tmp_path / name / "model.py"
    proc = ks("check", missing)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"task file not found: {missing}" in " ".join(proc.stderr.split()), proc.stderr


@pytest.mark.parametrize("command", ["optimize", "bench"])
def test_an_output_path_that_cannot_be_written_is_one_line_and_exit_2(command, tmp_path):
    """A workdir or --out under a file (or on a read-only disk) is the user's to fix: one line naming the path,
    not "internal error: NotADirectoryError", and nothing the user had is touched."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine")
    task = Path(__file__).resolve().parents[1] / "examples" / "bias_gelu_scale" / "model.py"
    where = ["--workdir", str(blocker / "ks")] if command == "optimize" else ["--out", str(blocker / "bench")]
    proc = ks(command, str(task), *where, "--device", "cpu", "--max-turns", "1", "--backend", "builtin")
    assert_one_line_error(proc)
    assert str(blocker) in proc.stderr and "internal error" not in proc.stderr
    assert blocker.read_text() == "mine"


def test_python_dash_m_kernelsmith_is_the_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernelsmith", "doctor", "--json"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert any(check["name"] == "torch" and check["ok"] for check in json.loads(proc.stdout))
    bad = subprocess.run([sys.executable, "-m", "kernelsmith", "eval", str(tmp_path / "none.py"), "x.py"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert_one_line_error(bad)
