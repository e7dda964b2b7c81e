// Binding for rms_norm_rows.cu: checks, output allocation, current stream.
#include "binding_light.h"
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int rms_norm_rows_launch(const float* x, const float* w, float* y, float eps,
                                    int64_t rows, int64_t n, int config, cudaStream_t stream);

at::Tensor rms_norm_rows(at::Tensor x, at::Tensor weight, double eps, int64_t config) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "rms_norm_rows: x and weight must be CUDA tensors");
  TORCH_CHECK(x.device() == weight.device(), "rms_norm_rows: x and weight must be on the same device");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "rms_norm_rows: x must be float32");
  TORCH_CHECK(weight.scalar_type() == at::kFloat, "rms_norm_rows: weight must be float32");
  TORCH_CHECK(x.is_contiguous(), "rms_norm_rows: x must be contiguous");
  TORCH_CHECK(weight.is_contiguous(), "rms_norm_rows: weight must be contiguous");
  TORCH_CHECK(x.dim() >= 1, "rms_norm_rows: x must have at least one dimension");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1),
              "rms_norm_rows: weight must be 1-D with x.size(-1) elements");
  auto y = at::empty_like(x);
  const int64_t n = x.size(-1);
  if (x.numel() == 0) return y;
  const int64_t rows = x.numel() / n;
  TORCH_CHECK(rows <= 0x7fffffffLL, "rms_norm_rows: too many rows for one launch");
  int status = rms_norm_rows_launch(x.data_ptr<float>(), weight.data_ptr<float>(),
                                    y.data_ptr<float>(), (float)eps, rows, n, (int)config,
                                    c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(status == 0, "rms_norm_rows: launch failed: ",
              cudaGetErrorString((cudaError_t)status));
  return y;
}

REGISTER_KERNEL(rms_norm_rows, rms_norm_rows);
