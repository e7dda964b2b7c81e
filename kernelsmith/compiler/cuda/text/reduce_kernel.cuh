// A team of TEAM threads per (o, i) pair of the operand viewed as [$outer, $size, $inner].
template <int TEAM, int SLOTS, bool ROWS$vec>
__global__ void __launch_bounds__(TEAM * SLOTS) ${name}_reduce($params) {
  const int lane = ROWS ? (int)threadIdx.x % TEAM : (int)threadIdx.x / SLOTS;
  const int slot = ROWS ? (int)threadIdx.x / TEAM : (int)threadIdx.x % SLOTS;
  for (int64_t base = (int64_t)blockIdx.x * SLOTS; base < kSlots; base += (int64_t)gridDim.x * SLOTS) {
    const int64_t red = base + slot;  // o * kInner + i, the flat index of the reduced value
    const bool active = red < kSlots;
    const int64_t o = red / kInner, i = red % kInner;
$body
  }
}
