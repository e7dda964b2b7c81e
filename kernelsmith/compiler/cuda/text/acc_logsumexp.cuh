struct Acc {
  float m, s;  // running max, and the sum of exp(x - m)
  __device__ void init() { m = -INFINITY; s = 0.0f; }
  __device__ void join(float om, float os) {  // exact at infinities: no exp(inf - inf)
    const float nm = fmaxf(m, om);
    s = (m == nm ? s : s * expf(m - nm)) + (om == nm ? os : os * expf(om - nm));
    m = nm;
  }
  __device__ void add(float x, int64_t) { join(x, 1.0f); }
  __device__ void merge(const Acc& o) { join(o.m, o.s); }
  __device__ Acc shfl_xor(int mask) const {
    Acc o;
    o.m = __shfl_xor_sync(0xffffffffu, m, mask);
    o.s = __shfl_xor_sync(0xffffffffu, s, mask);
    return o;
  }
};
