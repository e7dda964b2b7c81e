// Masked row softmax: y = softmax(where(mask, x / t, -inf)) over the last dim.
//
// One block per row. Pass 1: each thread keeps an online (max, sum) pair over
// its unmasked elements (float4 + uchar4 loads when aligned); the pairs are
// merged with warp shuffles and a shared-memory stage. Pass 2 re-reads the
// row (from cache) and writes exp(z - max) / sum, or 0 where masked. A row
// with no unmasked element gives NaN everywhere, as PyTorch does.
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

struct MaxSum {
  float m;  // running max (-inf when empty)
  float s;  // sum of exp(z - m)
};

__device__ __forceinline__ void online_add(MaxSum& a, float z) {
  if (z > a.m) {
    a.s = a.s * expf(a.m - z) + 1.0f;  // expf(-inf) == 0 on the first element
    a.m = z;
  } else if (a.m != -INFINITY) {
    a.s += expf(z - a.m);
  }
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return a;  // both empty
  MaxSum r;
  r.m = m;
  r.s = a.s * expf(a.m - m) + b.s * expf(b.m - m);
  return r;
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum o;
    o.m = __shfl_xor_sync(0xffffffffu, v.m, offset);
    o.s = __shfl_xor_sync(0xffffffffu, v.s, offset);
    v = merge(v, o);
  }
  return v;
}

// blockDim.x must be a multiple of 32 (the launcher guarantees it).
__device__ __forceinline__ MaxSum block_merge(MaxSum v) {
  __shared__ float sm[32];
  __shared__ float ss[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = warp_merge(v);
  if (lane == 0) { sm[warp] = v.m; ss[warp] = v.s; }
  __syncthreads();
  if (warp == 0) {
    MaxSum w;
    w.m = lane < n_warps ? sm[lane] : -INFINITY;
    w.s = lane < n_warps ? ss[lane] : 0.0f;
    w = warp_merge(w);
    if (lane == 0) { sm[0] = w.m; ss[0] = w.s; }
  }
  __syncthreads();
  MaxSum r;
  r.m = sm[0];
  r.s = ss[0];
  return r;
}

__device__ __forceinline__ float out_value(float x, bool keep, float t, float m, float inv_s) {
  return keep ? expf(x / t - m) * inv_s : 0.0f;
}

__global__ void masked_row_softmax_vec4(const float4* __restrict__ x,
                                        const uchar4* __restrict__ mask,
                                        float4* __restrict__ y, float t, int64_t n_vec) {
  const int64_t base = (int64_t)blockIdx.x * n_vec;
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    const float4 v = x[base + i];
    const uchar4 k = mask[base + i];
    if (k.x) online_add(acc, v.x / t);
    if (k.y) online_add(acc, v.y / t);
    if (k.z) online_add(acc, v.z / t);
    if (k.w) online_add(acc, v.w / t);
  }
  const MaxSum row = block_merge(acc);
  if (row.m == -INFINITY) {  // fully masked row: softmax of all -inf is NaN
    for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x)
      y[base + i] = make_float4(NAN, NAN, NAN, NAN);
    return;
  }
  const float inv_s = 1.0f / row.s;
  for (int64_t i = threadIdx.x; i < n_vec; i += blockDim.x) {
    const float4 v = x[base + i];
    const uchar4 k = mask[base + i];
    float4 o;
    o.x = out_value(v.x, k.x, t, row.m, inv_s);
    o.y = out_value(v.y, k.y, t, row.m, inv_s);
    o.z = out_value(v.z, k.z, t, row.m, inv_s);
    o.w = out_value(v.w, k.w, t, row.m, inv_s);
    y[base + i] = o;
  }
}

__global__ void masked_row_softmax_scalar(const float* __restrict__ x,
                                          const uint8_t* __restrict__ mask,
                                          float* __restrict__ y, float t, int64_t n) {
  const int64_t base = (int64_t)blockIdx.x * n;
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (mask[base + i]) online_add(acc, x[base + i] / t);
  const MaxSum row = block_merge(acc);
  if (row.m == -INFINITY) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) y[base + i] = NAN;
    return;
  }
  const float inv_s = 1.0f / row.s;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    y[base + i] = out_value(x[base + i], mask[base + i] != 0, t, row.m, inv_s);
}

// mask: one byte per element, 0 or 1 (torch.bool storage).
// config: threads per block (0 = default 256; rounded up to a multiple of 32).
extern "C" int masked_row_softmax_launch(const float* x, const uint8_t* mask, float* y,
                                         float temperature, int64_t rows, int64_t n, int config,
                                         cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return (int)cudaSuccess;
  if (rows > 0x7fffffffLL) return (int)cudaErrorInvalidConfiguration;
  const bool aligned = (n % 4 == 0) && ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0) &&
                       ((uintptr_t)mask % 4 == 0);
  const int64_t work = aligned ? n / 4 : n;
  int threads = (config > 0 && config <= 1024) ? config : 256;
  threads = (threads + 31) / 32 * 32;
  const int64_t needed = (work + 31) / 32 * 32;
  if (needed < threads) threads = (int)needed;
  if (aligned) {
    masked_row_softmax_vec4<<<(unsigned)rows, threads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<const uchar4*>(mask),
        reinterpret_cast<float4*>(y), temperature, work);
  } else {
    masked_row_softmax_scalar<<<(unsigned)rows, threads, 0, stream>>>(x, mask, y, temperature, n);
  }
  return (int)cudaGetLastError();
}
