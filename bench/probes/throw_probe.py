"""Does a failing TORCH_CHECK in a CUDA extension raise RuntimeError or crash? (device probe)

    python3 bench/probes/throw_probe.py plain|cublas|cpu   -> builds, calls with a bad shape, prints the outcome

plain and cublas crashed with SIGSEGV on the H200 machine (2026-11-30) and raise on our CPU box;
cpu (no .cu, a CPU build on the device) tells the device's toolchain apart from the CUDA link.
"""
import faulthandler
import sys
import tempfile
from pathlib import Path

import torch

from kernelsmith.harness import build

CU = """#include <cuda_runtime.h>
extern "C" int k_launch(const float* x, float* y, int n, cudaStream_t s) { return 0; }
"""
CUBLAS = """#include <cublas_v2.h>
extern "C" int k_handle() { cublasHandle_t h; return (int)cublasCreate(&h); }
"""
BINDING = """#include <torch/extension.h>
#include "binding_registry.h"
torch::Tensor f(torch::Tensor x, int64_t config) {
  TORCH_CHECK((x.sizes().vec() == std::vector<int64_t>{8, 512}), "f: input x must have shape [8, 512], got ", x.sizes());
  return x;
}
REGISTER_BINDING(f, f);
"""

faulthandler.enable()  # the Python stack at a crash
kind = sys.argv[1]
root = Path(tempfile.mkdtemp())
(root / "kernels").mkdir()
if kind != "cpu":
    (root / "kernels" / "k.cu").write_text(CU)
(root / "kernels" / "k_binding.cpp").write_text(BINDING)
if kind == "cublas":
    (root / "kernels" / "h.cu").write_text(CUBLAS)
device = "cpu" if kind == "cpu" else "cuda"
result = build.build(root / "kernels", device, build_dir=root / "build")
print(kind, "built", result.ok, result.summary, flush=True)
ext = build.import_extension(result.so_path, result.name)
try:
    ext.f(torch.zeros(4, 512, device=device), 0)
except RuntimeError as err:
    print(kind, "RAISED", str(err).splitlines()[0], flush=True)
