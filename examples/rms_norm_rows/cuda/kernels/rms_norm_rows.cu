// RMSNorm over the last dimension: y = x * (1 / sqrt(mean(x^2) + eps)) * w.
//
// One block per row. Pass 1: each thread accumulates a fp32 partial sum of
// squares (float4 loads when the rows are 16-byte aligned), reduced with warp
// shuffles and a 32-slot shared-memory stage. Pass 2 re-reads the row (it is
// still in L1/L2) and writes the scaled output. 1.0f / sqrtf(...) is used
// instead of rsqrtf, which is an approximation.
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// blockDim.x must be a multiple of 32 (the launcher guarantees it).
__device__ __forceinline__ float block_sum(float v, float* smem /* >= 32 floats */) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < n_warps ? smem[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) smem[0] = v;
  }
  __syncthreads();
  return smem[0];
}

__global__ void rms_norm_rows_vec4(const float4* __restrict__ x, const float4* __restrict__ w,
                                   float4* __restrict__ y, float eps, int64_t n_vec, int64_t n) {
  __shared__ float smem[32];
  const float4* xr = x + (int64_t)blockIdx.x * n_vec;
  float4* yr = y + (int64_t)blockIdx.x * n_vec;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    const float4 v = xr[i];
    acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  const float ss = block_sum(acc, smem);
  const float inv = 1.0f / sqrtf(ss / (float)n + eps);
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    float4 v = xr[i];
    const float4 g = w[i];
    v.x = v.x * inv * g.x;
    v.y = v.y * inv * g.y;
    v.z = v.z * inv * g.z;
    v.w = v.w * inv * g.w;
    yr[i] = v;
  }
}

__global__ void rms_norm_rows_scalar(const float* __restrict__ x, const float* __restrict__ w,
                                     float* __restrict__ y, float eps, int64_t n) {
  __shared__ float smem[32];
  const float* xr = x + (int64_t)blockIdx.x * n;
  float* yr = y + (int64_t)blockIdx.x * n;
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i];
    acc += v * v;
  }
  const float ss = block_sum(acc, smem);
  const float inv = 1.0f / sqrtf(ss / (float)n + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

// config: threads per block (0 = default 256; rounded up to a multiple of 32).
extern "C" int rms_norm_rows_launch(const float* x, const float* w, float* y, float eps,
                                    int64_t rows, int64_t n, int config, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return (int)cudaSuccess;
  if (rows > 0x7fffffffLL) return (int)cudaErrorInvalidConfiguration;
  const bool aligned = (n % 4 == 0) && ((uintptr_t)x % 16 == 0) && ((uintptr_t)w % 16 == 0) &&
                       ((uintptr_t)y % 16 == 0);
  const int64_t work = aligned ? n / 4 : n;  // items per row, one per thread per step
  int threads = (config > 0 && config <= 1024) ? config : 256;
  threads = (threads + 31) / 32 * 32;
  // Short rows: do not launch warps that would have nothing to load.
  const int64_t needed = (work + 31) / 32 * 32;
  if (needed < threads) threads = (int)needed;
  if (aligned) {
    rms_norm_rows_vec4<<<(unsigned)rows, threads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<const float4*>(w),
        reinterpret_cast<float4*>(y), eps, work, n);
  } else {
    rms_norm_rows_scalar<<<(unsigned)rows, threads, 0, stream>>>(x, w, y, eps, n);
  }
  return (int)cudaGetLastError();
}
