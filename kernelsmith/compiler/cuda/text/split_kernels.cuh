// Few long lines: each of the kSlots lines of the operand viewed as [$outer, $size, $inner] is cut
// into kChunks chunks of kChunk elements, a block per chunk, so the whole GPU reads. Pass 1 folds
// each chunk into an accumulator in ${name}_partials; pass 2 merges a line's partials in each
// block that needs them, writes the reduced values (chunk 0) and runs the second pass over its
// own chunk. Every call rewrites all the partials before it reads them, so nothing carries over
// between calls; two calls on two streams at once would share them.
constexpr int64_t kChunks = ${chunks}LL, kChunk = ${chunk}LL, kFinishChunks = ${finish_chunks}LL;
__device__ Acc ${name}_partials[kSlots * kChunks];

template <int TEAM>
__global__ void __launch_bounds__(TEAM) ${name}_split_partial($params) {
  const int lane = (int)threadIdx.x, slot = 0;
  const int64_t red = (int64_t)blockIdx.x / kChunks, chunk = (int64_t)blockIdx.x % kChunks;
  const int64_t o = red / kInner, i = red % kInner;
  const int64_t begin = chunk * kChunk, end = begin + kChunk < kSize ? begin + kChunk : kSize;
  Acc acc;
  acc.init();
$first
  acc = ks_team_reduce<TEAM, 1, true>(acc, lane, slot);
  if (lane == 0) ${name}_partials[blockIdx.x] = acc;
}

template <int TEAM>
__global__ void __launch_bounds__(TEAM) ${name}_split_finish($params) {
  const int lane = (int)threadIdx.x, slot = 0;
  const int64_t red = (int64_t)blockIdx.x / kFinishChunks, chunk = (int64_t)blockIdx.x % kFinishChunks;
  // without a second pass only the reduced values are written: the range goes unused
  [[maybe_unused]] const int64_t o = red / kInner, i = red % kInner;
  [[maybe_unused]] const int64_t begin = chunk * kChunk, end = begin + kChunk < kSize ? begin + kChunk : kSize;
  Acc acc;
  acc.init();
  for (int64_t c = lane; c < kChunks; c += TEAM) acc.merge(${name}_partials[red * kChunks + c]);
  acc = ks_team_reduce<TEAM, 1, true>(acc, lane, slot);
$finish
}
