#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

#include "binding_registry.h"

extern "C" int sigmoid_launch(const float* x, float* y, int64_t n, int config, cudaStream_t stream);

torch::Tensor sigmoid_forward(torch::Tensor x, int64_t config) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
              "sigmoid: x must be a contiguous float32 CUDA tensor");
  auto y = torch::empty_like(x);
  int status = sigmoid_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), (int)config,
                              at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "sigmoid: launch failed: ", cudaGetErrorString((cudaError_t)status));
  return y;
}

REGISTER_BINDING(sigmoid, sigmoid_forward);
