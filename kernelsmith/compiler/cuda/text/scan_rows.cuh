// A team of TEAM threads per row of the operand viewed as [$outer, $size, 1], in tiles of TEAM
// elements: scan the tile, add the carry of the tiles before it.
template <int TEAM, int SLOTS>
__global__ void __launch_bounds__(TEAM * SLOTS) ${name}_scan_rows($params) {
  const int lane = (int)threadIdx.x % TEAM, slot = (int)threadIdx.x / TEAM;
  for (int64_t base = (int64_t)blockIdx.x * SLOTS; base < kSlots; base += (int64_t)gridDim.x * SLOTS) {
    const int64_t o = base + slot, i = 0;
    if (o >= kSlots) break;  // uniform across a team: SLOTS > 1 only for warp-sized teams
    float carry = 0.0f;
    for (int64_t tile = 0; tile < kSize; tile += TEAM) {
      const int64_t r = tile + lane;
      const bool in = r < kSize;
      const int64_t flat = (o * kSize + (in ? r : kSize - 1)) * kInner + i;  // past the end: a valid address
$element
      float total;
      const float scanned = ks_team_scan<TEAM>(in ? ks_x : 0.0f, lane, &total);
      if (in) {
        const float ks_prefix = carry + scanned;
$finish
      }
      carry += total;
    }
  }
}
