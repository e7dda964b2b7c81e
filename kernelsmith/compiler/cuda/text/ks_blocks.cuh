inline unsigned ks_blocks(int64_t work, int64_t per_block) {
  const int64_t blocks = (work + per_block - 1) / per_block;
  return (unsigned)(blocks < 1 ? 1 : (blocks > ${max_blocks}LL ? ${max_blocks}LL : blocks));
}
