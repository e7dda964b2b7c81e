"""Does a failing TORCH_CHECK in an extension raise RuntimeError or crash? (device probe)

    python3 bench/probes/throw_probe.py KIND   -> builds, calls with a bad shape, prints the outcome

KIND: plain | cublas | cpu      our harness build (cpu: no .cu at all)
      inline-check | inline-throw   torch's own load_inline, a failing TORCH_CHECK or a plain
                                    `throw std::runtime_error`: crashes there too mean the device's
                                    torch and compiler disagree, not our build
      torch-op                      a failing torch op, no extension at all
      quiet-check                   inline-check after the harness's op watch extension set an
                                    empty stack-trace fetcher (c10::SetStackTraceFetcher)
      env                           the compilers, the ABI flag and the torch build
On the H200 machine (2026-11-30) plain, cpu and inline-check crash with SIGSEGV, and inline-throw
raises: only a c10::Error crashes, and torch's own load_inline crashes too. c10::Error's
constructor walks the whole native stack for its backtrace (pytorch#117645: a segfault in
linear_search_fdes there), a plain throw does not. The machine builds extensions with
CXX=/opt/gcc/bin/g++, while torch was built with GCC 13.3; device.sh also tries CXX=/usr/bin/c++.
"""
import faulthandler
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import torch

CU = """#include <cuda_runtime.h>
extern "C" int k_launch(const float* x, float* y, int n, cudaStream_t s) { return 0; }
"""
CUBLAS = """#include <cublas_v2.h>
extern "C" int k_handle() { cublasHandle_t h; return (int)cublasCreate(&h); }
"""
CHECK = """torch::Tensor f(torch::Tensor x, int64_t config) {
  TORCH_CHECK((x.sizes().vec() == std::vector<int64_t>{8, 512}), "f: input x must have shape [8, 512], got ", x.sizes());
  return x;
}
"""
THROW = """torch::Tensor f(torch::Tensor x, int64_t config) {
  if (x.size(0) != 8) throw std::runtime_error("f: plain runtime_error");
  return x;
}
"""


def harness_ext(kind: str, root: Path):
    from kernelsmith.harness import build
    (root / "kernels").mkdir()
    if kind != "cpu":
        (root / "kernels" / "k.cu").write_text(CU)
    (root / "kernels" / "k_binding.cpp").write_text(
        '#include <torch/extension.h>\n#include "binding_registry.h"\n' + CHECK + "REGISTER_BINDING(f, f);\n")
    if kind == "cublas":
        (root / "kernels" / "h.cu").write_text(CUBLAS)
    result = build.build(root / "kernels", "cpu" if kind == "cpu" else "cuda", build_dir=root / "build")
    print(kind, "built", result.ok, result.summary, flush=True)
    return build.import_extension(result.so_path, result.name)


def inline_ext(kind: str, root: Path):
    from torch.utils.cpp_extension import load_inline
    body = CHECK if kind == "inline-check" else THROW
    return load_inline(kind.replace("-", "_"), cpp_sources=[body], functions=["f"], build_directory=str(root),
                       verbose=True)


def env() -> None:
    print("python", sys.version.split()[0], sysconfig.get_config_var("CC"))
    print("torch", torch.__version__, "cxx11 abi", torch._C._GLIBCXX_USE_CXX11_ABI)
    print("\n".join(torch.__config__.show().splitlines()[:8]))
    cxx = os.environ.get("CXX", "c++")
    print("CXX", cxx, "TORCH_SHOW_CPP_STACKTRACES", os.environ.get("TORCH_SHOW_CPP_STACKTRACES"))
    for cmd in ([cxx, "--version"], ["c++", "--version"], ["ld", "--version"], ["ldd", "--version"],
                ["which", "cuda-gdb"]):
        done = subprocess.run(cmd, capture_output=True, text=True)
        print("$", *cmd, "->", (done.stdout or done.stderr).splitlines()[:1])


def main(kind: str) -> None:
    if kind == "env":
        return env()
    faulthandler.enable()  # the Python stack at a crash
    if kind == "torch-op":
        try:
            torch.mm(torch.zeros(2, 3), torch.zeros(4, 5))
        except RuntimeError as err:
            print(kind, "RAISED", str(err).splitlines()[0], flush=True)
        return
    root = Path(tempfile.mkdtemp())
    if kind == "quiet-check":
        from kernelsmith.harness import op_watch
        watch, why = op_watch.load_extension()
        print(kind, "op watch:", "loaded" if watch else why, flush=True)
        watch.quiet_backtraces()
        kind = "inline-check"
    ext = inline_ext(kind, root) if kind.startswith("inline") else harness_ext(kind, root)
    device = "cuda" if kind in ("plain", "cublas") else "cpu"
    try:
        ext.f(torch.zeros(4, 512, device=device), 0)
    except RuntimeError as err:
        print(kind, "RAISED", str(err).splitlines()[0], flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
