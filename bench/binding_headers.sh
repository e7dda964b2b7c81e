#!/usr/bin/env bash
# What a generated kernel binding's compile costs, and what of it is <torch/extension.h>.
#
#     bash bench/binding_headers.sh [BINDING.cpp] [OUTDIR]
#
# Compiles, one at a time and without the precompiled header, at the flags torch's extension builder
# gives a .cpp (-std=c++17 -fPIC, the ABI flag, torch's include folders):
#   headers   <torch/extension.h> and binding_registry.h, nothing else
#   binding   the binding as generated (its REGISTER_BINDING is pybind11's m.def)
#   no-def    the binding without its REGISTER_BINDING line
#   aten      the same without pybind11: <ATen/ATen.h> instead of <torch/extension.h>
#   light     <ATen/core/Tensor.h> and <ATen/ops/empty.h> only
# and prints wall seconds and object size of each. On a machine with only the CUDA runtime headers
# (a CPU torch wheel has no cuda_cmake_macros.h, and no cuBLAS headers), the binding's CUDA guard and
# its current-stream call are removed first: what is left is the same host code.
set -euo pipefail
SRC=${1:-bench/candidates/level2_45_Gemm_Sigmoid_LogSumExp/kernels/k0_gemm_binding.cpp}
W=${2:-$(mktemp -d)}
REPO=$(cd "$(dirname "$0")/.." && pwd)
T=$(python3 -c "import torch, os; print(os.path.dirname(torch.__file__))")
PY=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
CUDA=${CUDA_HOME:-/usr/local/cuda}
cp "$REPO/kernelsmith/templates/binding_registry.h" "$W/"
sed '/ATen\/cuda\/CUDAContext.h/d; /c10\/cuda\/CUDAGuard.h/d; s/const at::cuda::CUDAGuard device_guard([^;]*;//;
     s/at::cuda::getCurrentCUDAStream()/(cudaStream_t)nullptr/' "$SRC" > "$W/binding.cpp"
grep -v '^REGISTER_BINDING' "$W/binding.cpp" > "$W/no-def.cpp"
sed 's|#include <torch/extension.h>|#include <ATen/ATen.h>|; /binding_registry.h/d; s/torch::Tensor/at::Tensor/g;
     s/torch::kFloat32/at::kFloat/g; s/torch::empty/at::empty/g' "$W/no-def.cpp" > "$W/aten.cpp"
sed 's|#include <ATen/ATen.h>|#include <ATen/core/Tensor.h>\n#include <ATen/ops/empty.h>|' "$W/aten.cpp" > "$W/light.cpp"
printf '#include <torch/extension.h>\n#include "binding_registry.h"\n' > "$W/headers.cpp"
FLAGS="-std=c++17 -fPIC -w -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=ks_probe -D_GLIBCXX_USE_CXX11_ABI=1
       -I$T/include -I$T/include/torch/csrc/api/include -I$PY -I$CUDA/include -I$W"
echo "| file | -O | wall s | object bytes |"
echo "| --- | --- | --- | --- |"
for case in "headers -O3" "binding -O3" "binding -O1" "no-def -O3" "aten -O3" "light -O3" "light -O1"; do
  set -- $case
  start=$(date +%s.%N)
  g++ $FLAGS "$2" -c "$W/$1.cpp" -o "$W/$1$2.o"
  echo "| $1 | $2 | $(echo "$(date +%s.%N) - $start" | bc | xargs printf '%.1f') | $(stat -c %s "$W/$1$2.o") |"
done
