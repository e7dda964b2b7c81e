struct Acc {
  float a;
  int64_t k;  // index along the reduced range; -1 while nothing is seen
  __device__ void init() { a = 0.0f; k = -1; }
  // (x, xk) replaces (a, k) when better, or equal and earlier; the first NaN wins, as in torch
  __device__ void take(float x, int64_t xk) {
    if (xk < 0) return;
    bool better;
    if (k < 0) better = true;
    else if (x != x || a != a) better = (x != x) && (a == a || xk < k);
    else better = x $cmp a || (x == a && xk < k);
    if (better) { a = x; k = xk; }
  }
  __device__ void add(float x, int64_t r) { take(x, r); }
  __device__ void merge(const Acc& o) { take(o.a, o.k); }
  __device__ Acc shfl_xor(int mask) const {
    Acc o;
    o.a = __shfl_xor_sync(0xffffffffu, a, mask);
    o.k = (int64_t)__shfl_xor_sync(0xffffffffu, (long long)k, mask);
    return o;
  }
};
