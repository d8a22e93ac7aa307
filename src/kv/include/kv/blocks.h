// Block arithmetic shared by KvManager and the scheduler's KV planning (what a request
// will still need, beyond what it holds).
#pragma once

#include <cstdint>

namespace ts::kv {

// Blocks that hold n_tokens cells (the last one possibly partly filled).
constexpr int64_t blocks_for_tokens(int64_t n_tokens, int32_t block_size) {
  return n_tokens <= 0 ? 0 : (n_tokens + block_size - 1) / block_size;
}

// Blocks a sequence holding `n_blocks` for `n_computed` tokens needs to append `n_new`
// more (0 when the last block has room). Copy-on-write of a shared last block is not
// counted (KvManager::blocks_needed counts it).
constexpr int64_t blocks_to_append(int64_t n_computed, int64_t n_blocks, int64_t n_new, int32_t block_size) {
  const int64_t need = blocks_for_tokens(n_computed + n_new, block_size) - n_blocks;
  return need > 0 ? need : 0;
}

// Tokens that can be appended after n_computed within n_blocks + n_free_blocks blocks.
constexpr int64_t tokens_that_fit(int64_t n_computed, int64_t n_blocks, int64_t n_free_blocks, int32_t block_size) {
  const int64_t cap = (n_blocks + n_free_blocks) * int64_t(block_size) - n_computed;
  return cap > 0 ? cap : 0;
}

}  // namespace ts::kv
