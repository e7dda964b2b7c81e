// First try: a typo the compiler catches (undeclared `alpah`).
#include <torch/extension.h>

#include "binding_registry.h"

torch::Tensor triple(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "triple: contiguous float32 only");
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = alpah * in[i];
  return y;
}

REGISTER_BINDING(triple, triple);
