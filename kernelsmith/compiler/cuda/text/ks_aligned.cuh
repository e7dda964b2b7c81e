inline bool ks_aligned(const void* p) { return ((uintptr_t)p & 15) == 0; }
