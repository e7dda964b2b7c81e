// Binding for bias_gelu_scale.cu: checks, output allocation, current stream.
#include "binding_light.h"
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int bias_gelu_scale_launch(const float* x, const float* bias, float* y, float scale,
                                      int64_t rows, int64_t n, int config,
                                      cudaStream_t stream);

at::Tensor bias_gelu_scale(at::Tensor x, at::Tensor bias, double scale,
                           int64_t config) {
  TORCH_CHECK(x.is_cuda() && bias.is_cuda(), "bias_gelu_scale: x and bias must be CUDA tensors");
  TORCH_CHECK(x.device() == bias.device(), "bias_gelu_scale: x and bias must be on the same device");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "bias_gelu_scale: x must be float32");
  TORCH_CHECK(bias.scalar_type() == at::kFloat, "bias_gelu_scale: bias must be float32");
  TORCH_CHECK(x.is_contiguous(), "bias_gelu_scale: x must be contiguous");
  TORCH_CHECK(bias.is_contiguous(), "bias_gelu_scale: bias must be contiguous");
  TORCH_CHECK(x.dim() >= 1, "bias_gelu_scale: x must have at least one dimension");
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(-1),
              "bias_gelu_scale: bias must be 1-D with x.size(-1) elements");
  auto y = at::empty_like(x);
  const int64_t n = x.size(-1);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / n;
  int status = bias_gelu_scale_launch(x.data_ptr<float>(), bias.data_ptr<float>(),
                                      y.data_ptr<float>(), (float)scale, rows, n, (int)config,
                                      c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "bias_gelu_scale: launch failed: ",
              cudaGetErrorString((cudaError_t)status));
  return y;
}

REGISTER_KERNEL(bias_gelu_scale, bias_gelu_scale);
