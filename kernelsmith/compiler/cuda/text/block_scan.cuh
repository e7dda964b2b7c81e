// Inclusive prefix sum across a team of TEAM threads (a warp, or a whole block of TEAM threads);
// every thread also gets the team's total. A block-wide team must call it together.
template <int TEAM>
__device__ __forceinline__ float ks_team_scan(float v, int lane, float* total) {
  const int warp = lane >> 5, l = lane & 31;
  for (int d = 1; d < 32; d <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, v, d);
    if (l >= d) v += y;
  }
  if constexpr (TEAM == 32) {
    *total = __shfl_sync(0xffffffffu, v, 31);
    return v;
  } else {
    __shared__ float sums[TEAM / 32];
    if (l == 31) sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
      float s = l < TEAM / 32 ? sums[l] : 0.0f;
      for (int d = 1; d < 32; d <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, s, d);
        if (l >= d) s += y;
      }
      if (l < TEAM / 32) sums[l] = s;
    }
    __syncthreads();
    if (warp > 0) v += sums[warp - 1];
    *total = sums[TEAM / 32 - 1];
    __syncthreads();  // everyone has read sums before the next tile writes them
    return v;
  }
}
