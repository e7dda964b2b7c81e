// ITEMS consecutive elements a thread, TEAM threads a row (one row a block), in tiles of TEAM * ITEMS
// elements of the operand viewed as [$outer, $size, 1]: each thread scans its items in registers and the
// team scans the threads' totals once a tile, ITEMS times fewer block-wide scans and barriers than
// ${name}_scan_rows, which scans one element a thread. The epilogue loads its element's inputs a second time.
template <int TEAM, int ITEMS>
__global__ void __launch_bounds__(TEAM) ${name}_scan_rows_items($params) {
  const int lane = (int)threadIdx.x;
  for (int64_t o = blockIdx.x; o < kSlots; o += gridDim.x) {
    const int64_t i = 0;
    float carry = 0.0f;
    for (int64_t tile = 0; tile < kSize; tile += (int64_t)TEAM * ITEMS) {
      float run[ITEMS];  // this thread's inclusive prefix of its items
      float local = 0.0f;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64_t r = tile + (int64_t)lane * ITEMS + k;
        const bool in = r < kSize;
        const int64_t flat = (o * kSize + (in ? r : kSize - 1)) * kInner + i;  // past the end: a valid address
$element
        local += in ? ks_x : 0.0f;
        run[k] = local;
      }
      float total;
      const float before = ks_team_scan<TEAM>(local, lane, &total) - local;  // the team's threads before this one
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int64_t r = tile + (int64_t)lane * ITEMS + k;
        if (r < kSize) {
          const int64_t flat = (o * kSize + r) * kInner + i;
          // the element's loads and prologue again (from the cache: the tile was just read), for the epilogue
$element
          (void)ks_x;  // scanned already: only the loads and the prologue's values are wanted here
          const float ks_prefix = carry + (before + run[k]);
$finish
        }
      }
      carry += total;
    }
  }
}
