// CPU candidate: RMSNorm over the last dimension, float32 in and out, the sum
// of squares accumulated in double; OpenMP across rows.
#include "binding_light.h"

#include <cmath>

static void rms_norm_rows_kernel(const float* x, const float* w, float* y, float eps,
                                 int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < n; ++c) ss += (double)xr[c] * (double)xr[c];
    const float mean = (float)(ss / (double)n);
    const float inv = 1.0f / std::sqrt(mean + eps);
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) yr[c] = xr[c] * inv * w[c];
  }
}

at::Tensor rms_norm_rows(at::Tensor x, at::Tensor weight, double eps, int64_t config) {
  (void)config;
  TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(),
              "rms_norm_rows: x and weight must be CPU tensors");
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
  rms_norm_rows_kernel(x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(),
                       (float)eps, x.numel() / n, n);
  return y;
}

REGISTER_KERNEL(rms_norm_rows, rms_norm_rows);
