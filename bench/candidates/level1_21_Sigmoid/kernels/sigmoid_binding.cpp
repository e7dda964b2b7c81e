#include "binding_light.h"

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int sigmoid_launch(const float* x, float* y, int64_t n, int config, cudaStream_t stream);

at::Tensor sigmoid_forward(at::Tensor x, int64_t config) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat && x.is_contiguous(),
              "sigmoid: x must be a contiguous float32 CUDA tensor");
  auto y = at::empty_like(x);
  int status = sigmoid_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), (int)config,
                              c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "sigmoid: launch failed: ", cudaGetErrorString((cudaError_t)status));
  return y;
}

REGISTER_KERNEL(sigmoid, sigmoid_forward);
