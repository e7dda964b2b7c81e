// y = x @ w, float32, row-major: OpenMP over rows of y, the inner loop over y's row vectorised
// (i-k-j order, the k loop in blocks so a block of w stays in cache). A light binding.
#include "binding_light.h"

#include <cstdint>

static void gemm_kernel(const float* x, const float* w, float* y, int64_t m, int64_t k, int64_t n) {
  constexpr int64_t kBlock = 128;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; ++i) {
    float* row = y + i * n;
    for (int64_t j = 0; j < n; ++j) row[j] = 0.0f;
    for (int64_t k0 = 0; k0 < k; k0 += kBlock) {
      const int64_t k1 = k0 + kBlock < k ? k0 + kBlock : k;
      for (int64_t kk = k0; kk < k1; ++kk) {
        const float a = x[i * k + kk];
        const float* wrow = w + kk * n;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) row[j] += a * wrow[j];
      }
    }
  }
}

at::Tensor gemm(at::Tensor x, at::Tensor w) {
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "gemm: x and w must be CPU tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "gemm: float32 only");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(0), "gemm: shapes must be [m, k] and [k, n]");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "gemm: x and w must be contiguous");
  auto y = at::empty({x.size(0), w.size(1)}, x.options());
  gemm_kernel(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1), w.size(1));
  return y;
}

REGISTER_KERNEL(gemm, gemm);
