// Worked example: y = alpha * x, float32, with vectorised float4 loads.
// A .cu file includes only CUDA headers; torch stays in the paired *_binding.cpp.
// Delete or replace this example once you have kernels of your own.
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void example_scale_vec4(const float4* __restrict__ x, float4* __restrict__ y,
                                   float alpha, int64_t n_vec) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_vec; i += stride) {
    float4 v = x[i];
    v.x *= alpha; v.y *= alpha; v.z *= alpha; v.w *= alpha;
    y[i] = v;
  }
}

__global__ void example_scale_tail(const float* __restrict__ x, float* __restrict__ y,
                                   float alpha, int64_t start, int64_t n) {
  int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = alpha * x[i];
}

// The launcher takes the stream from the binding and an integer config
// (here: the block size), so launch shapes can be tuned without new code.
// It returns the launch status so that the binding can raise a readable error.
extern "C" int example_scale_launch(const float* x, float* y, float alpha, int64_t n,
                                    int config, cudaStream_t stream) {
  int threads = config > 0 ? config : 256;
  bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0);
  int64_t n_vec = aligned ? n / 4 : 0;
  if (n_vec > 0) {
    int64_t blocks = (n_vec + threads - 1) / threads;
    if (blocks > 65535LL * 32) blocks = 65535LL * 32;
    example_scale_vec4<<<(unsigned)blocks, threads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), alpha, n_vec);
  }
  int64_t done = n_vec * 4;
  if (done < n) {
    int64_t rest = n - done;
    example_scale_tail<<<(unsigned)((rest + threads - 1) / threads), threads, 0, stream>>>(
        x, y, alpha, done, n);
  }
  return (int)cudaGetLastError();
}
