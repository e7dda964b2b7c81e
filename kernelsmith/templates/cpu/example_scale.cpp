// Worked example for the CPU target: y = alpha * x, float32, OpenMP across cores.
// The kernel is plain C++ over raw pointers; the binding part below does only
// checks and allocation. It is a light binding: it includes "binding_light.h" (ATen's
// Tensor, no pybind11) and registers with REGISTER_KERNEL, so it compiles in seconds.
// Delete or replace this example once you have your own.
#include "binding_light.h"

static void example_scale_kernel(const float* x, float* y, float alpha, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

at::Tensor example_scale(at::Tensor x, double alpha, int64_t config) {
  (void)config;  // the CPU example has nothing to tune
  TORCH_CHECK(x.device().is_cpu(), "example_scale: x must be a CPU tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "example_scale: x must be float32");
  TORCH_CHECK(x.is_contiguous(), "example_scale: x must be contiguous");
  auto y = at::empty(x.sizes(), x.options());
  example_scale_kernel(x.data_ptr<float>(), y.data_ptr<float>(), (float)alpha, x.numel());
  return y;
}

REGISTER_KERNEL(example_scale, example_scale);
