// CPU candidate: masked row softmax, float32. Per row: max over the unmasked
// z = x / t, then exp(z - max) written out and summed (double accumulator),
// then one scaling pass. OpenMP across rows. A fully masked row gives NaN,
// as PyTorch does.
#include "binding_light.h"

#include <algorithm>
#include <cmath>
#include <limits>

static void masked_row_softmax_kernel(const float* x, const uint8_t* mask, float* y, float t,
                                      int64_t rows, int64_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const uint8_t* mr = mask + r * n;
    float* yr = y + r * n;
    float m = neg_inf;
    for (int64_t c = 0; c < n; ++c)
      if (mr[c]) m = std::max(m, xr[c] / t);
    if (m == neg_inf) {
      for (int64_t c = 0; c < n; ++c) yr[c] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    double s = 0.0;
    for (int64_t c = 0; c < n; ++c) {
      const float e = mr[c] ? std::exp(xr[c] / t - m) : 0.0f;
      yr[c] = e;
      s += e;
    }
    const float inv_s = (float)(1.0 / s);
    for (int64_t c = 0; c < n; ++c) yr[c] *= inv_s;
  }
}

at::Tensor masked_row_softmax(at::Tensor x, at::Tensor mask, double temperature,
                              int64_t config) {
  (void)config;
  TORCH_CHECK(x.device().is_cpu() && mask.device().is_cpu(),
              "masked_row_softmax: x and mask must be CPU tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "masked_row_softmax: x must be float32");
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_row_softmax: mask must be bool");
  TORCH_CHECK(x.is_contiguous() && mask.is_contiguous(),
              "masked_row_softmax: x and mask must be contiguous");
  TORCH_CHECK(x.dim() >= 1, "masked_row_softmax: x must have at least one dimension");
  TORCH_CHECK(mask.sizes() == x.sizes(), "masked_row_softmax: mask must have the shape of x");
  auto y = at::empty_like(x);
  const int64_t n = x.size(-1);
  if (x.numel() == 0) return y;
  masked_row_softmax_kernel(x.data_ptr<float>(), reinterpret_cast<const uint8_t*>(mask.data_ptr<bool>()),
                            y.data_ptr<float>(), (float)temperature, x.numel() / n, n);
  return y;
}

REGISTER_KERNEL(masked_row_softmax, masked_row_softmax);
