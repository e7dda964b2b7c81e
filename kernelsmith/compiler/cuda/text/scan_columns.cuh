// One thread per (o, i) of the operand viewed as [$outer, $size, $inner], walking its range in
// order: neighbouring threads read neighbouring columns, so the loads coalesce.
template <int SLOTS>
__global__ void __launch_bounds__(SLOTS) ${name}_scan_columns($params) {
  for (int64_t red = (int64_t)blockIdx.x * SLOTS + threadIdx.x; red < kSlots; red += (int64_t)gridDim.x * SLOTS) {
    const int64_t o = red / kInner, i = red % kInner;
    float carry = 0.0f;
    for (int64_t r = 0; r < kSize; ++r) {
      const int64_t flat = (o * kSize + r) * kInner + i;
$element
      carry += ks_x;
      const float ks_prefix = carry;
$finish
    }
  }
}
