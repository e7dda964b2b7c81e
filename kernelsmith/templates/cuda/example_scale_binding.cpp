// Binding for example_scale.cu: tensor checks, output allocation, the current
// stream, and the registration. Only allocation (at::empty*) is allowed here:
// torch compute in a binding is rejected by the verifier. It is a light binding:
// "binding_light.h" (ATen's Tensor, no pybind11) and REGISTER_KERNEL, so it
// compiles in seconds.
#include "binding_light.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int example_scale_launch(const float* x, float* y, float alpha, int64_t n,
                                    int config, cudaStream_t stream);

at::Tensor example_scale(at::Tensor x, double alpha, int64_t config) {
  TORCH_CHECK(x.is_cuda(), "example_scale: x must be a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "example_scale: x must be float32");
  TORCH_CHECK(x.is_contiguous(), "example_scale: x must be contiguous");
  const c10::cuda::CUDAGuard device_guard(x.device());
  auto y = at::empty(x.sizes(), x.options());
  int status = example_scale_launch(x.data_ptr<float>(), y.data_ptr<float>(), (float)alpha,
                                    x.numel(), (int)config, c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "example_scale: launch failed: ",
              cudaGetErrorString((cudaError_t)status));
  return y;
}

REGISTER_KERNEL(example_scale, example_scale);
