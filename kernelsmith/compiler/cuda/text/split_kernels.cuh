// Few long lines: each of the kSlots lines of the operand viewed as [$outer, $size, $inner] is cut
// into kChunks chunks of kChunk elements, and a block takes SLOTS lines' same chunk, so the whole GPU
// reads (rows: a team of TEAM consecutive threads per line, SLOTS 1; columns: SLOTS adjacent lines, their
// teams SLOTS apart, so a warp reads one row of 32 columns at once). Pass 1 folds each chunk into an
// accumulator in ${name}_partials; pass 2 merges a line's partials in each block that needs them,
// writes the reduced values (chunk 0) and runs the second pass over its own chunk. Every call rewrites
// all the partials before it reads them, so nothing carries over between calls; two calls on two
// streams at once would share them.
constexpr int64_t kChunks = ${chunks}LL, kChunk = ${chunk}LL, kFinishChunks = ${finish_chunks}LL;
__device__ Acc ${name}_partials[kSlots * kChunks];

template <int TEAM, int SLOTS, bool ROWS>
__global__ void __launch_bounds__(TEAM * SLOTS) ${name}_split_partial($params) {
  const int lane = ROWS ? (int)threadIdx.x % TEAM : (int)threadIdx.x / SLOTS;
  const int slot = ROWS ? (int)threadIdx.x / TEAM : (int)threadIdx.x % SLOTS;
  const int64_t red = (int64_t)blockIdx.x / kChunks * SLOTS + slot, chunk = (int64_t)blockIdx.x % kChunks;
  const bool active = red < kSlots;
  const int64_t o = red / kInner, i = red % kInner;
  const int64_t begin = chunk * kChunk, end = begin + kChunk < kSize ? begin + kChunk : kSize;
  Acc acc;
  acc.init();
  if (active) {
$first
  }
  acc = ks_team_reduce<TEAM, SLOTS, ROWS>(acc, lane, slot);
  if (lane == 0 && active) ${name}_partials[red * kChunks + chunk] = acc;
}

template <int TEAM, int SLOTS, bool ROWS>
__global__ void __launch_bounds__(TEAM * SLOTS) ${name}_split_finish($params) {
  const int lane = ROWS ? (int)threadIdx.x % TEAM : (int)threadIdx.x / SLOTS;
  const int slot = ROWS ? (int)threadIdx.x / TEAM : (int)threadIdx.x % SLOTS;
  const int64_t red = (int64_t)blockIdx.x / kFinishChunks * SLOTS + slot;
  const int64_t chunk = (int64_t)blockIdx.x % kFinishChunks;
  const bool active = red < kSlots;
  // without a second pass only the reduced values are written: the range goes unused
  [[maybe_unused]] const int64_t o = red / kInner, i = red % kInner;
  [[maybe_unused]] const int64_t begin = chunk * kChunk, end = begin + kChunk < kSize ? begin + kChunk : kSize;
  Acc acc;
  acc.init();
  if (active) {
    for (int64_t c = lane; c < kChunks; c += TEAM) acc.merge(${name}_partials[red * kChunks + c]);
  }
  acc = ks_team_reduce<TEAM, SLOTS, ROWS>(acc, lane, slot);
  if (active) {
$finish
  }
}
