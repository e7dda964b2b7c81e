// CPU candidate: y[r, c] = gelu(x[r, c] + bias[c]) * scale, exact erf GELU,
// float32, one fused pass with OpenMP across rows.
#include "binding_light.h"

#include <cmath>

static void bias_gelu_scale_kernel(const float* x, const float* bias, float* y, float scale,
                                   int64_t rows, int64_t n) {
  const float inv_sqrt2 = 0.70710678118654752440f;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    for (int64_t c = 0; c < n; ++c) {
      const float v = xr[c] + bias[c];
      yr[c] = 0.5f * v * (1.0f + std::erf(v * inv_sqrt2)) * scale;
    }
  }
}

at::Tensor bias_gelu_scale(at::Tensor x, at::Tensor bias, double scale,
                           int64_t config) {
  (void)config;
  TORCH_CHECK(x.device().is_cpu() && bias.device().is_cpu(),
              "bias_gelu_scale: x and bias must be CPU tensors");
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
  bias_gelu_scale_kernel(x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                         (float)scale, x.numel() / n, n);
  return y;
}

REGISTER_KERNEL(bias_gelu_scale, bias_gelu_scale);
