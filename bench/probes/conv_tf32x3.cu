// Device probe for issue 20 (bench/probes/conv_tf32x3.py): a 2-d convolution by CUTLASS's implicit GEMM in
// 3xTF32 (float32 accuracy on tensor cores), NHWC activations and KRSC filters, as the dev tasks' convolutions
// would run if the built-in policy had such a path. Built by the probe with
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90 -shared -Xcompiler -fPIC -I<cutlass include>
// and called through ctypes.
#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"  // before the device header, which needs its problem sizes
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/epilogue/thread/linear_combination.h"

namespace {

struct KsSwizzle : cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4> {};

template <int TM, int TN, int TK, int WM, int WN, int Stages, int Align>
using Fprop = cutlass::conv::device::ImplicitGemmConvolution<typename cutlass::conv::kernel::DefaultConv2dFprop<
    float, cutlass::layout::TensorNHWC, float, cutlass::layout::TensorNHWC, float, cutlass::layout::TensorNHWC, float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<TM, TN, TK>,
    cutlass::gemm::GemmShape<WM, WN, TK>, cutlass::gemm::GemmShape<16, 8, 8>,
    cutlass::epilogue::thread::LinearCombination<float, Align, float, float>, KsSwizzle, Stages,
    cutlass::arch::OpMultiplyAddFastF32,
    Align == 4 ? cutlass::conv::IteratorAlgorithm::kOptimized : cutlass::conv::IteratorAlgorithm::kAnalytic,
    cutlass::conv::StrideSupport::kStrided, Align, Align>::Kernel>;

template <class Conv>
int run(const float* x, const float* w, float* y, const cutlass::conv::Conv2dProblemSize& size, cudaStream_t stream) {
  using cutlass::layout::TensorNHWC;
  TensorNHWC x_layout = TensorNHWC::packed({size.N, size.H, size.W, size.C});
  TensorNHWC w_layout = TensorNHWC::packed({size.K, size.R, size.S, size.C});
  TensorNHWC y_layout = TensorNHWC::packed({size.N, size.P, size.Q, size.K});
  typename Conv::Arguments args{size,
                                {const_cast<float*>(x), x_layout},
                                {const_cast<float*>(w), w_layout},
                                {y, y_layout},
                                {y, y_layout},
                                {1.0f, 0.0f}};
  Conv conv;
  if (conv.can_implement(args) != cutlass::Status::kSuccess) return -1;
  if (Conv::get_workspace_size(args) != 0) return -2;
  cutlass::Status status = conv.initialize(args, nullptr, stream);
  if (status == cutlass::Status::kSuccess) status = conv(stream);
  return status == cutlass::Status::kSuccess ? 0 : 20000 + (int)status;
}

}  // namespace

// y[n, p, q, k] = sum over r, s, c of x[n, p*stride - pad + r*dil, q*stride - pad + s*dil, c] * w[k, r, s, c].
// Returns 0, -1 (CUTLASS refuses these sizes at this tile and alignment), or 20000 + the CUTLASS status.
extern "C" int ks_conv_tf32x3(const float* x, const float* w, float* y, int n, int h, int wd, int c, int k, int r,
                              int s, int p, int q, int pad_h, int pad_w, int stride_h, int stride_w, int dil_h,
                              int dil_w, int tile, cudaStream_t stream) {
  cutlass::conv::Conv2dProblemSize size({n, h, wd, c}, {k, r, s, c}, {pad_h, pad_h, pad_w, pad_w},
                                        {stride_h, stride_w}, {dil_h, dil_w}, {n, p, q, k},
                                        cutlass::conv::Mode::kCrossCorrelation, 1);
  switch (tile) {
    case 0: return run<Fprop<128, 128, 16, 32, 64, 4, 4>>(x, w, y, size, stream);
    case 1: return run<Fprop<128, 64, 16, 64, 32, 3, 4>>(x, w, y, size, stream);
    case 2: return run<Fprop<64, 64, 32, 32, 32, 3, 4>>(x, w, y, size, stream);
    case 3: return run<Fprop<128, 64, 16, 64, 32, 3, 1>>(x, w, y, size, stream);  // any channel count
    default: return -1;
  }
}
