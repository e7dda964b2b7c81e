struct Acc {
  float a;
  __device__ void init() { a = 0.0f; }
  __device__ void add(float x, int64_t) { a += $term; }
  __device__ void merge(const Acc& o) { a += o.a; }
  __device__ Acc shfl_xor(int mask) const { Acc o; o.a = __shfl_xor_sync(0xffffffffu, a, mask); return o; }
};
