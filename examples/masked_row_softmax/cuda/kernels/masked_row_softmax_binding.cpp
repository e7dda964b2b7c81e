// Binding for masked_row_softmax.cu: checks, output allocation, current stream.
#include "binding_light.h"
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int masked_row_softmax_launch(const float* x, const uint8_t* mask, float* y,
                                         float temperature, int64_t rows, int64_t n, int config,
                                         cudaStream_t stream);

at::Tensor masked_row_softmax(at::Tensor x, at::Tensor mask, double temperature,
                              int64_t config) {
  TORCH_CHECK(x.is_cuda() && mask.is_cuda(), "masked_row_softmax: x and mask must be CUDA tensors");
  TORCH_CHECK(x.device() == mask.device(), "masked_row_softmax: x and mask must be on the same device");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "masked_row_softmax: x must be float32");
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_row_softmax: mask must be bool");
  TORCH_CHECK(x.is_contiguous() && mask.is_contiguous(),
              "masked_row_softmax: x and mask must be contiguous");
  TORCH_CHECK(x.dim() >= 1, "masked_row_softmax: x must have at least one dimension");
  TORCH_CHECK(mask.sizes() == x.sizes(), "masked_row_softmax: mask must have the shape of x");
  auto y = at::empty_like(x);
  const int64_t n = x.size(-1);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / n;
  TORCH_CHECK(rows <= 0x7fffffffLL, "masked_row_softmax: too many rows for one launch");
  int status = masked_row_softmax_launch(
      x.data_ptr<float>(), reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>()),
      y.data_ptr<float>(), (float)temperature, rows, n, (int)config,
      c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "masked_row_softmax: launch failed: ",
              cudaGetErrorString((cudaError_t)status));
  return y;
}

REGISTER_KERNEL(masked_row_softmax, masked_row_softmax);
