"""The harness on a real GPU: honest kernels pass, GPU-only hacks are caught. Run on the device.

Candidates use CuPy RawModule kernels (compiled by NVRTC in a second) so the
tests stay fast; the torch-extension path is covered by the examples' CUDA
candidates and by an init -> compile -> verify workdir.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the device)")]

from kernelsmith.evaluation.options import EvalOptions

from kernelsmith.evaluation.evaluate import evaluate  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * 2.0 + self.bias


def get_inputs():
    return [torch.randn(8192, 4096)]


def get_init_inputs():
    return [4096]
'''

MATMUL_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(2048, 2048), torch.randn(2048, 2048)]


def get_init_inputs():
    return []
'''

PRELUDE = r'''
import ctypes
import cupy as cp
import torch
import torch.nn as nn

_SRC = r"""
extern "C" __global__ void axpb(const float* x, const float* b, float* y, long long rows, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < rows * n) y[i] = x[i] * 2.0f + b[i % n];
}
extern "C" __global__ void axpb_slow(const float* x, const float* b, float* y, long long rows, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= rows * n) return;
  float v = x[i];
  for (int k = 0; k < 2000; ++k) v = v * 1.0000001f;
  y[i] = x[i] * 2.0f + b[i % n] + (v - v);
}
extern "C" __global__ void axpb_oob(const float* x, const float* b, float* y, long long rows, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  y[i + (1LL << 36)] = 1.0f;
}
"""
_mod = cp.RawModule(code=_SRC)


def launch(name, x, bias, stream=None):
    y = torch.empty_like(x)
    n = x.numel()
    args = (cp.asarray(x.detach()), cp.asarray(bias.detach()), cp.asarray(y), cp.int64(x.shape[0]), cp.int64(x.shape[1]))
    stream = stream or cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
    with stream:
        _mod.get_function(name)(((n + 255) // 256,), (256,), args)
    return y


class Base(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))
'''


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("gputask")
    (root / "model.py").write_text(TASK)
    (root / "matmul.py").write_text(MATMUL_TASK)
    return root


def write(task_dir: Path, body: str) -> Path:
    path = task_dir / f"cand_{uuid.uuid4().hex[:8]}.py"
    path.write_text(PRELUDE + "\n" + textwrap.dedent(body))
    return path


def run(task_dir, body, reference="model.py", **opts):
    opts.setdefault("device", "cuda")
    opts.setdefault("compile_baseline", False)
    opts.setdefault("min_runs", 50)
    return evaluate(task_dir / reference, write(task_dir, body), EvalOptions(**opts))


HONEST = '''
class ModelNew(Base):
    def forward(self, x):
        return launch("axpb", x, self.bias)
'''


def test_honest_cuda_kernel_with_compile_baselines(task_dir):
    result = run(task_dir, HONEST, compile_baseline=True)
    assert result.clean, result.error
    assert result.gpu.startswith("NVIDIA"), result.gpu
    for key in ("candidate", "eager", "compile:default", "compile:max-autotune-no-cudagraphs"):
        assert result.timings_ms[key] > 0, key
    assert result.speedup_vs_compile is not None and result.compile_mode
    assert result.roofline["min_bytes"] == 2 * 8192 * 4096 * 4 + 4096 * 4
    assert 0 < result.roofline["pct_of_bandwidth"] < 120
    assert result.reward in (1.0, 2.0, 3.0)


def test_work_on_a_side_stream_is_caught(task_dir):
    result = run(task_dir, '''
        _side = cp.cuda.Stream(non_blocking=True)

        class ModelNew(Base):
            def forward(self, x):
                return launch("axpb_slow", x, self.bias, stream=_side)
    ''')
    assert not result.clean
    assert any("outside the timed stream" in v for v in result.violations), result.violations


def test_illegal_memory_access_is_a_failed_attempt(task_dir):
    result = run(task_dir, '''
        class ModelNew(Base):
            def forward(self, x):
                return launch("axpb_oob", x, self.bias)
    ''')
    assert not result.correct and result.reward == -1
    assert "illegal" in result.error.lower() or "crashed" in result.error.lower(), result.error


def test_persisting_l2_window_is_reset_before_every_timed_run(task_dir, tmp_path, monkeypatch):
    log = tmp_path / "limits.txt"
    monkeypatch.setenv("KERNELSMITH_JAIL_WRITABLE", str(tmp_path))  # the jailed candidate writes its log there
    result = run(task_dir, f'''
        _rt = None
        import glob, os
        for _name in glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libcudart*")) + \\
                glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu*", "lib", "libcudart.so*")) + \\
                ["libcudart.so", "libcudart.so.13"]:
            try:
                _rt = ctypes.CDLL(_name)
                break
            except OSError:
                pass
        _LIMIT = 0x06

        def _limit():
            value = ctypes.c_size_t(0)
            _rt.cudaDeviceGetLimit(ctypes.byref(value), _LIMIT)
            return value.value

        class ModelNew(Base):
            def forward(self, x):
                with open({str(log)!r}, "a") as f:
                    f.write(str(_limit()) + "\\n")
                _rt.cudaDeviceSetLimit(_LIMIT, ctypes.c_size_t(16 << 20))  # ask for a persisting carve-out
                return launch("axpb", x, self.bias)
    ''', profile=True)
    assert result.clean, result.error
    reads = [int(v) for v in log.read_text().split()]
    assert reads.count(0) >= result.seconds["profile_runs"], reads[:20]
    assert any(v > 0 for v in reads)  # the carve-out was really granted between runs


def test_tf32_matmul_fails_fp32_and_passes_explicit_tf32(task_dir):
    body = '''
        import os
        os.environ["CUPY_TF32"] = "1"

        class ModelNew(nn.Module):
            def forward(self, a, b):
                out = torch.empty(a.shape[0], b.shape[1], device=a.device)
                stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
                with stream:
                    cp.matmul(cp.asarray(a), cp.asarray(b), out=cp.asarray(out))
                return out
    '''
    strict = run(task_dir, body, reference="matmul.py", profile=False)
    assert not strict.correct and ("outside atol=" in strict.error or "relative L2" in strict.error), strict.error
    loose = run(task_dir, body, reference="matmul.py", profile=False, precision="tf32")
    assert loose.clean, loose.error


@pytest.mark.parametrize("example", ["bias_gelu_scale", "rms_norm_rows", "masked_row_softmax"])
def test_example_cuda_candidates(example):
    root = REPO / "examples" / example
    result = evaluate(root / "model.py", root / "cuda" / "model_new.py",
                      EvalOptions(device="cuda", compile_baseline=False, min_runs=50))
    assert result.build.get("ok"), result.build
    assert result.clean, result.error
    assert result.speedup_vs_eager and result.speedup_vs_eager > 0


def test_init_compile_verify_workdir_on_cuda(tmp_path):
    task = tmp_path / "scale.py"
    task.write_text('''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 3.0


def get_inputs():
    return [torch.randn(4096, 1027)]


def get_init_inputs():
    return []
''')
    cli = [sys.executable, "-m", "kernelsmith.cli"]
    wd = tmp_path / "wd"
    subprocess.run(cli + ["init", str(task), "--workdir", str(wd), "--device", "cuda"], check=True)
    new = (wd / "model_new.py").read_text().replace(
        'raise NotImplementedError("ModelNew.forward is not written yet: write kernels in kernels/ and call them here")',
        "return ext.example_scale(inputs[0], 3.0, 0)")
    (wd / "model_new.py").write_text(new)
    cold = subprocess.run(cli + ["compile", str(wd), "--json"], capture_output=True, text=True)
    assert cold.returncode == 0, cold.stdout + cold.stderr
    verify = subprocess.run(cli + ["verify", str(wd), "--json"], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    result = json.loads(verify.stdout)
    assert result["correct"] and result["build"]["cached"] and result["device"] == "cuda"
