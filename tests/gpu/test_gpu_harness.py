"""The harness on a real GPU: honest kernels pass, GPU-only hacks are caught. Run on the device.

The candidates share one torch extension (kernels/ beside them, built once per
module); harness v3 refuses CuPy and other compute libraries inside a candidate.
The examples' CUDA candidates and an init -> compile -> verify workdir follow.
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

# The candidates' kernels: one torch extension built once for the module (harness v3 refuses
# CuPy and other compute libraries inside a candidate, so the kernels go through kernels/ as a
# user's would). Every attack is a launch mode of the same extension.
KERNELS_CU = r"""
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void axpb(const float* x, const float* b, float* y, long long rows, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < rows * n) y[i] = x[i] * 2.0f + b[i % n];
}
__global__ void axpb_slow(const float* x, const float* b, float* y, long long rows, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i >= rows * n) return;
  float v = x[i];
  for (int k = 0; k < 2000; ++k) v = v * 1.0000001f;
  y[i] = x[i] * 2.0f + b[i % n] + (v - v);
}
__global__ void axpb_oob(const float* x, const float* b, float* y, long long rows, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  y[i + (1LL << 36)] = 1.0f;
}

// mode 0: honest; 1: slow kernel on a side stream of its own; 2: out-of-bounds write
extern "C" int axpb_launch(const float* x, const float* b, float* y, long long rows, long long n, int mode,
                           cudaStream_t stream) {
  static cudaStream_t side = nullptr;
  const long long total = rows * n;
  const unsigned blocks = (unsigned)((total + 255) / 256);
  if (mode == 1) {
    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    axpb_slow<<<blocks, 256, 0, side>>>(x, b, y, rows, n);
  } else if (mode == 2) {
    axpb_oob<<<blocks, 256, 0, stream>>>(x, b, y, rows, n);
  } else {
    axpb<<<blocks, 256, 0, stream>>>(x, b, y, rows, n);
  }
  return (int)cudaGetLastError();
}

// Rounds to TF32 (10 mantissa bits, to nearest) before each product: what a TF32 tensor-core
// GEMM does to fp32 operands, without touching any of torch's math-mode flags.
__device__ __forceinline__ float tf32(float v) {
  return __uint_as_float((__float_as_uint(v) + 0x1000u) & 0xffffe000u);
}
__global__ void matmul_tf32(const float* a, const float* b, float* c, int m, int k, int n) {
  __shared__ float as[16][16], bs[16][16];
  int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float acc = 0.0f;
  for (int t = 0; t < k; t += 16) {
    as[threadIdx.y][threadIdx.x] = (row < m && t + threadIdx.x < k) ? tf32(a[row * (long long)k + t + threadIdx.x]) : 0.0f;
    bs[threadIdx.y][threadIdx.x] = (col < n && t + threadIdx.y < k) ? tf32(b[(t + threadIdx.y) * (long long)n + col]) : 0.0f;
    __syncthreads();
    for (int j = 0; j < 16; ++j) acc += as[threadIdx.y][j] * bs[j][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * (long long)n + col] = acc;
}
extern "C" int matmul_tf32_launch(const float* a, const float* b, float* c, int m, int k, int n, cudaStream_t stream) {
  dim3 grid((n + 15) / 16, (m + 15) / 16), block(16, 16);
  matmul_tf32<<<grid, block, 0, stream>>>(a, b, c, m, k, n);
  return (int)cudaGetLastError();
}

// The persisting-L2 carve-out: returns the limit it found, then asks for `bytes`.
extern "C" long long persisting_l2_swap(long long bytes) {
  size_t value = 0;
  cudaDeviceGetLimit(&value, cudaLimitPersistingL2CacheSize);
  cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, (size_t)bytes);
  return (long long)value;
}
"""

KERNELS_BINDING = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

#include "binding_registry.h"

extern "C" int axpb_launch(const float*, const float*, float*, long long, long long, int, cudaStream_t);
extern "C" int matmul_tf32_launch(const float*, const float*, float*, int, int, int, cudaStream_t);
extern "C" long long persisting_l2_swap(long long);

torch::Tensor axpb(torch::Tensor x, torch::Tensor b, int64_t mode) {
  auto y = torch::empty_like(x);
  int status = axpb_launch(x.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1),
                           (int)mode, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "axpb: ", cudaGetErrorString((cudaError_t)status));
  return y;
}

torch::Tensor matmul_tf32(torch::Tensor a, torch::Tensor b) {
  auto c = torch::empty({a.size(0), b.size(1)}, a.options());
  int status = matmul_tf32_launch(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), (int)a.size(0),
                                  (int)a.size(1), (int)b.size(1), at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "matmul_tf32: ", cudaGetErrorString((cudaError_t)status));
  return c;
}

int64_t persisting_l2(int64_t bytes) { return persisting_l2_swap(bytes); }

REGISTER_BINDING(axpb, axpb);
REGISTER_BINDING(matmul_tf32, matmul_tf32);
REGISTER_BINDING(persisting_l2, persisting_l2);
"""

PRELUDE = r'''
import torch
import torch.nn as nn
from kernelsmith.ext import load_kernels

ext = load_kernels()
HONEST, SIDE_STREAM, OUT_OF_BOUNDS = 0, 1, 2


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
    (root / "kernels").mkdir()
    (root / "kernels" / "axpb.cu").write_text(KERNELS_CU)
    (root / "kernels" / "axpb_binding.cpp").write_text(KERNELS_BINDING)
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
        return ext.axpb(x, self.bias, HONEST)
'''


def test_honest_cuda_kernel_with_compile_baselines(task_dir, tmp_path):
    cache = tmp_path / "baselines.json"
    result = run(task_dir, HONEST, compile_baseline=True, cache_path=cache)
    assert result.clean, result.error
    assert result.gpu.startswith("NVIDIA"), result.gpu
    for key in ("candidate", "eager", "compile:default", "compile:max-autotune-no-cudagraphs"):
        assert result.timings_ms[key] > 0, key
    assert result.speedup_vs_compile is not None and result.compile_mode
    assert result.roofline["min_bytes"] == 2 * 8192 * 4096 * 4 + 4096 * 4
    assert 0 < result.roofline["pct_of_bandwidth"] < 120
    assert result.reward in (1.0, 2.0, 3.0)
    # every baseline timed by both timers (a sync before the start event, and queued as do_bench times),
    # the faster credited
    (entry,) = json.loads(cache.read_text()).values()
    by_timer = entry["by_timer"]
    assert entry["eager_ms"] == min(by_timer["eager"], by_timer["eager@queued"]) == result.timings_ms["eager"]
    for mode, ms in entry["compile_ms"].items():
        assert ms == min(by_timer[f"compile:{mode}"], by_timer[f"compile:{mode}@queued"])


def test_verify_hands_every_trial_to_the_judge_in_device_memory(task_dir, monkeypatch):
    """The candidate's outputs go to the judge's own VMM buffers (harness/handoff.py), device to device,
    across the jail's PID namespace; a wrong kernel still fails there; the file path stays on request."""
    result = run(task_dir, HONEST, profile=False)
    assert result.correct and result.clean, result.error
    judged = [t for t in result.trials if not t.get("skipped")]
    assert {t["outputs_in"] for t in judged} == {"handoff"}, [t.get("handoff_note") for t in judged]
    wrong = run(task_dir, '''
        class ModelNew(Base):
            def forward(self, x):
                return ext.axpb(x, x[0], HONEST)  # the first row of x instead of the bias
    ''', profile=False)
    assert not wrong.correct and "wrong output" in wrong.error, wrong.error
    assert wrong.trials[0]["outputs_in"] == "handoff"
    monkeypatch.setenv("KERNELSMITH_OUTPUT_HANDOFF", "0")
    by_file = run(task_dir, HONEST, profile=False)
    assert by_file.correct and {t["outputs_in"] for t in by_file.trials if not t.get("skipped")} == {"file"}


def test_work_on_a_side_stream_is_caught(task_dir):
    result = run(task_dir, '''
        class ModelNew(Base):
            def forward(self, x):
                return ext.axpb(x, self.bias, SIDE_STREAM)
    ''')
    assert not result.clean
    assert any("outside the timed stream" in v for v in result.violations), result.violations


def test_illegal_memory_access_is_a_failed_attempt(task_dir):
    result = run(task_dir, '''
        class ModelNew(Base):
            def forward(self, x):
                return ext.axpb(x, self.bias, OUT_OF_BOUNDS)
    ''')
    assert not result.correct and result.reward == -1
    assert "illegal" in result.error.lower() or "crashed" in result.error.lower(), result.error


def test_persisting_l2_window_is_reset_before_every_timed_run(task_dir, tmp_path, monkeypatch):
    log = tmp_path / "limits.txt"
    monkeypatch.setenv("KERNELSMITH_JAIL_WRITABLE", str(tmp_path))  # the jailed candidate writes its log there
    result = run(task_dir, f'''
        class ModelNew(Base):
            def forward(self, x):
                with open({str(log)!r}, "a") as f:
                    f.write(str(ext.persisting_l2(16 << 20)) + "\\n")  # what it found; asks for a carve-out
                return ext.axpb(x, self.bias, HONEST)
    ''', profile=True)
    assert result.clean, result.error
    reads = [int(v) for v in log.read_text().split()]
    assert reads.count(0) >= result.seconds["profile_runs"], reads[:20]
    assert any(v > 0 for v in reads)  # the carve-out was really granted between runs


def test_tf32_matmul_fails_fp32_and_passes_explicit_tf32(task_dir):
    body = '''
        class ModelNew(nn.Module):
            def forward(self, a, b):
                return ext.matmul_tf32(a, b)
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
