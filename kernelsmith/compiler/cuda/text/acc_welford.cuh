// Welford's one-pass mean and M2 (the sum of squared deviations from the mean), kept relative to a shift k, the
// first value the accumulator saw: x - k is small even where x is far from 0 (1e4 + randn), so the running mean
// and M2 keep their digits. merge is Chan et al.'s parallel update, for accumulators of any two shifts.
struct Acc {
  float k, n, mean, m2;  // shift, count, mean of x - k, M2
  __device__ void init() { k = 0.0f; n = 0.0f; mean = 0.0f; m2 = 0.0f; }
  __device__ void add(float x, int64_t) {
    if (n == 0.0f) k = x;
    n += 1.0f;
    const float z = x - k, d = z - mean;
    mean += d * __frcp_rn(n);
    m2 += d * (z - mean);
  }
  __device__ void merge(const Acc& o) {
    if (o.n == 0.0f) return;
    if (n == 0.0f) { *this = o; return; }
    const float total = n + o.n, share = o.n / total;
    const float d = (o.k - k) + (o.mean - mean);  // the difference of the two means
    mean += d * share;
    m2 += o.m2 + d * d * n * share;
    n = total;
  }
  __device__ Acc shfl_xor(int mask) const {
    Acc o;
    o.k = __shfl_xor_sync(0xffffffffu, k, mask);
    o.n = __shfl_xor_sync(0xffffffffu, n, mask);
    o.mean = __shfl_xor_sync(0xffffffffu, mean, mask);
    o.m2 = __shfl_xor_sync(0xffffffffu, m2, mask);
    return o;
  }
};
