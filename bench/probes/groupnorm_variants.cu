// Issue 20 probe: why is the built-in policy's fused GroupNorm kernel of level2/21 (2.80 ms on an H100, against
// Inductor's 1.39 ms for its two kernels) slow? The kernel reads the conv output twice and writes it once
// (3 x 1.057 GB); at the H100's ~3 TB/s that is ~1.1 ms. This program times, on level2/21's shapes, the
// generated kernel's structure (one block per group row, Welford with a reciprocal per element, scalar loads)
// against variants that change one thing each:
//   sums    shifted sums (z = x - k; sum z, sum z^2) instead of Welford's per-element reciprocal
//   vec4    float4 loads and stores
//   team    threads per row (occupancy and the last wave)
//   copy    the same traffic with no arithmetic: the roofline of a one-kernel, two-read design
// Build and run: nvcc -O3 -arch=sm_90 -o /tmp/gnv bench/probes/groupnorm_variants.cu && /tmp/gnv
// (bash bench/device.sh groupnorm-variants). Timer: cudaEvents around one launch, median of 20 after 3 warm-ups;
// no L2 flush is needed at 1 GB a pass (the H100's L2 is 50 MB).
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <algorithm>
#include <vector>

constexpr int64_t kRows = 1024, kSize = 258064, kRun = 64516, kRuns = 4, kGroups = 8;

struct Welford {
  float k, n, mean, m2;
  __device__ void init() { k = n = mean = m2 = 0.0f; }
  __device__ void add(float x) {
    if (n == 0.0f) k = x;
    n += 1.0f;
    const float z = x - k, d = z - mean;
    mean += d * __frcp_rn(n);
    m2 += d * (z - mean);
  }
  __device__ Welford done() const { return *this; }
};

struct Sums {  // shifted sums: cheap per element; converted to (mean, M2) once per thread
  float k, n, s1, s2;
  __device__ void init() { k = n = s1 = s2 = 0.0f; }
  __device__ void add(float x) {
    if (n == 0.0f) k = x;
    n += 1.0f;
    const float z = x - k;
    s1 += z;
    s2 = fmaf(z, z, s2);
  }
  __device__ Welford done() const {
    Welford w;
    w.k = k; w.n = n;
    w.mean = n > 0.0f ? s1 / n : 0.0f;
    w.m2 = n > 0.0f ? fmaxf(s2 - s1 * w.mean, 0.0f) : 0.0f;
    return w;
  }
};

struct Copy {  // the same loads with no statistics: the bandwidth roofline of this structure
  float k, n, s1, s2;
  __device__ void init() { k = n = s1 = s2 = 0.0f; }
  __device__ void add(float x) { s1 += x; }
  __device__ Welford done() const { Welford w; w.k = 0; w.n = kSize; w.mean = s1 * 1e-30f; w.m2 = 1.0f; return w; }
};

__device__ Welford merge(Welford a, const Welford& o) {
  if (o.n == 0.0f) return a;
  if (a.n == 0.0f) return o;
  const float total = a.n + o.n, share = o.n / total, d = (o.k - a.k) + (o.mean - a.mean);
  a.mean += d * share;
  a.m2 += o.m2 + d * d * a.n * share;
  a.n = total;
  return a;
}

template <int TEAM>
__device__ Welford team_reduce(Welford a) {
  for (int mask = 16; mask > 0; mask >>= 1) {
    Welford o;
    o.k = __shfl_xor_sync(~0u, a.k, mask); o.n = __shfl_xor_sync(~0u, a.n, mask);
    o.mean = __shfl_xor_sync(~0u, a.mean, mask); o.m2 = __shfl_xor_sync(~0u, a.m2, mask);
    a = merge(a, o);
  }
  __shared__ Welford part[TEAM / 32];
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = a;
  __syncthreads();
  a = part[0];
  for (int w = 1; w < TEAM / 32; ++w) a = merge(a, part[w]);
  return a;
}

__device__ __forceinline__ float pre(float v, float cb, float b, float s) { return 1.0f / (1.0f + expf(-((v + cb + b) * s))); }

template <int TEAM, int VEC, class Acc>
__global__ void __launch_bounds__(TEAM) group_norm(const float* __restrict__ x, const float* __restrict__ cb,
    const float* __restrict__ bias, const float* __restrict__ scale, const float* __restrict__ weight,
    const float* __restrict__ shift, float* __restrict__ y) {
  const int64_t row = blockIdx.x;
  const int group = (int)(row % kGroups);
  Acc acc;
  acc.init();
  for (int j = 0; j < kRuns; ++j) {
    const int c = group * kRuns + j;
    const float a0 = __ldg(cb + c), a1 = __ldg(bias + c), a2 = __ldg(scale + c);
    const float* p = x + row * kSize + j * kRun;
    if constexpr (VEC == 4) {
      const float4* p4 = reinterpret_cast<const float4*>(p);
      for (int64_t r = threadIdx.x; r < kRun / 4; r += TEAM) {
        const float4 v = __ldg(p4 + r);
        acc.add(pre(v.x, a0, a1, a2)); acc.add(pre(v.y, a0, a1, a2));
        acc.add(pre(v.z, a0, a1, a2)); acc.add(pre(v.w, a0, a1, a2));
      }
    } else {
      for (int64_t r = threadIdx.x; r < kRun; r += TEAM) acc.add(pre(__ldg(p + r), a0, a1, a2));
    }
  }
  const Welford w = team_reduce<TEAM>(acc.done());
  const float mean = w.k + w.mean, rstd = 1.0f / sqrtf(w.m2 / (float)kSize + 1e-5f);
  for (int j = 0; j < kRuns; ++j) {
    const int c = group * kRuns + j;
    const float a0 = __ldg(cb + c), a1 = __ldg(bias + c), a2 = __ldg(scale + c);
    const float g = __ldg(weight + c) * rstd, h = __ldg(shift + c) - mean * g;
    const float* p = x + row * kSize + j * kRun;
    float* q = y + row * kSize + j * kRun;
    if constexpr (VEC == 4) {
      const float4* p4 = reinterpret_cast<const float4*>(p);
      float4* q4 = reinterpret_cast<float4*>(q);
      for (int64_t r = threadIdx.x; r < kRun / 4; r += TEAM) {
        const float4 v = __ldg(p4 + r);
        q4[r] = make_float4(fmaf(pre(v.x, a0, a1, a2), g, h), fmaf(pre(v.y, a0, a1, a2), g, h),
                            fmaf(pre(v.z, a0, a1, a2), g, h), fmaf(pre(v.w, a0, a1, a2), g, h));
      }
    } else {
      for (int64_t r = threadIdx.x; r < kRun; r += TEAM) q[r] = fmaf(pre(__ldg(p + r), a0, a1, a2), g, h);
    }
  }
}

struct Buffers { float *x, *cb, *bias, *scale, *weight, *shift, *y; };

template <int TEAM, int VEC, class Acc>
float time_ms(const Buffers& b, float* check) {
  auto launch = [&] { group_norm<TEAM, VEC, Acc><<<kRows, TEAM>>>(b.x, b.cb, b.bias, b.scale, b.weight, b.shift, b.y); };
  for (int i = 0; i < 3; ++i) launch();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    cudaEventRecord(start);
    launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float t;
    cudaEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  cudaMemcpy(check, b.y + 12345, sizeof(float) * 4, cudaMemcpyDeviceToHost);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

__global__ void fill(float* p, int64_t n, unsigned seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    p[i] = (float)(h & 0xffffff) / 16777216.0f * 4.0f - 2.0f;
  }
}

#define ROW(name, TEAM, VEC, ACC)                                                             \
  {                                                                                           \
    float check[4];                                                                           \
    const float t = time_ms<TEAM, VEC, ACC>(b, check);                                        \
    printf("| %-34s | %4d | %d | %7.3f | %6.0f | %+.5f %+.5f |\n", name, TEAM, VEC, t,          \
           gb / (t * 1e-3), check[0], check[1]);                                              \
  }

int main() {
  Buffers b;
  const int64_t n = kRows * kSize;
  cudaMalloc(&b.x, n * 4);
  cudaMalloc(&b.y, n * 4);
  float** small[] = {&b.cb, &b.bias, &b.scale, &b.weight, &b.shift};
  for (int i = 0; i < 5; ++i) {
    cudaMalloc(small[i], 32 * 4);
    fill<<<1, 32>>>(*small[i], 32, 17u + i);
  }
  fill<<<4096, 256>>>(b.x, n, 7u);
  cudaDeviceSynchronize();
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const double gb = 3.0 * n * 4 / 1e9;
  printf("%s, level2/21's GroupNorm: %lld rows of %lld floats (2 reads + 1 write = %.2f GB), cudaEvents, median of 20\n\n",
         prop.name, (long long)kRows, (long long)kSize, gb);
  printf("| variant | team | vec | ms | GB/s | y[12345..] |\n|---|---|---|---|---|---|\n");
  ROW("generated: welford, scalar", 256, 1, Welford);
  ROW("welford, float4", 256, 4, Welford);
  ROW("sums, scalar", 256, 1, Sums);
  ROW("sums, float4", 256, 4, Sums);
  ROW("sums, float4", 512, 4, Sums);
  ROW("sums, float4", 1024, 4, Sums);
  ROW("welford, float4", 512, 4, Welford);
  ROW("welford, float4", 1024, 4, Welford);
  ROW("copy (no statistics), float4", 256, 4, Copy);
  ROW("copy (no statistics), float4", 1024, 4, Copy);
  ROW("copy (no statistics), scalar", 256, 1, Copy);
  const cudaError_t err = cudaGetLastError();
  printf("\n%s\n", err == cudaSuccess ? "ok" : cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
