struct Acc {
  float a;
  __device__ void init() { a = $init; }
  __device__ void take(float x) { if (x $cmp a || x != x) a = x; }  // NaN wins, as in torch
  __device__ void add(float x, int64_t) { take(x); }
  __device__ void merge(const Acc& o) { take(o.a); }
  __device__ Acc shfl_xor(int mask) const { Acc o; o.a = __shfl_xor_sync(0xffffffffu, a, mask); return o; }
};
