// Binding for example_scale.cu: tensor checks, output allocation, the current
// stream, and the registration. Only allocation (torch::empty*) is allowed here:
// torch compute in a binding is rejected by the verifier.
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

#include "binding_registry.h"

extern "C" int example_scale_launch(const float* x, float* y, float alpha, int64_t n,
                                    int config, cudaStream_t stream);

torch::Tensor example_scale(torch::Tensor x, double alpha, int64_t config) {
  TORCH_CHECK(x.is_cuda(), "example_scale: x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "example_scale: x must be float32");
  TORCH_CHECK(x.is_contiguous(), "example_scale: x must be contiguous");
  auto y = torch::empty_like(x);
  int status = example_scale_launch(x.data_ptr<float>(), y.data_ptr<float>(), (float)alpha,
                                    x.numel(), (int)config, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "example_scale: launch failed: ",
              cudaGetErrorString((cudaError_t)status));
  return y;
}

REGISTER_BINDING(example_scale, example_scale);
