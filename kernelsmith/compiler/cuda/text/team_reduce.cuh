// Combine the accumulators of one team (the threads sharing an (o, i) pair); all get the total.
// ROWS: a team is TEAM consecutive threads (warp shuffles, then shared memory across warps);
// else a team is TEAM threads SLOTS apart (shared memory).
template <int TEAM, int SLOTS, bool ROWS>
__device__ __forceinline__ Acc ks_team_reduce(Acc a, int lane, int slot) {
  if constexpr (TEAM == 1) {
    return a;
  } else if constexpr (ROWS) {
    constexpr int kWarpLanes = TEAM < 32 ? TEAM : 32;
    for (int mask = kWarpLanes / 2; mask > 0; mask >>= 1) a.merge(a.shfl_xor(mask));
    if constexpr (TEAM > 32) {
      __shared__ Acc part[SLOTS][TEAM / 32];
      __syncthreads();  // the previous round's readers are done
      if ((lane & 31) == 0) part[slot][lane >> 5] = a;
      __syncthreads();
      a = part[slot][0];
      for (int w = 1; w < TEAM / 32; ++w) a.merge(part[slot][w]);
    }
    return a;
  } else {
    __shared__ Acc part[TEAM][SLOTS];
    __syncthreads();
    part[lane][slot] = a;
    __syncthreads();
    a = part[0][slot];
    for (int w = 1; w < TEAM; ++w) a.merge(part[w][slot]);
    return a;
  }
}
