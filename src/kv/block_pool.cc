#include "kv/block_pool.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace ts::kv {
namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t prefix_root_hash(uint64_t isolation_key) { return mix64(isolation_key ^ 0x6b76726f6f74ull); }

uint64_t prefix_block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent + 0x9E3779B97F4A7C15ull);
  for (int32_t t : tokens) h = mix64(h ^ (uint64_t(uint32_t(t)) + 0x632BE59BD9B4E019ull));
  return h == 0 ? 1 : h;
}

BlockPool::FreeRuns::FreeRuns(int32_t n) : leaves_(1), count_(n) {
  while (leaves_ < n) leaves_ *= 2;
  const size_t sz = size_t(2) * size_t(leaves_);
  pre_.assign(sz, 0);
  suf_.assign(sz, 0);
  best_.assign(sz, 0);
  start_.assign(sz, 0);
  for (int32_t b = 0; b < leaves_; ++b) {
    const size_t i = size_t(leaves_ + b);
    const int32_t f = b < n ? 1 : 0;  // leaves past the pool are never free
    pre_[i] = suf_[i] = best_[i] = f;
    start_[i] = b;
  }
  int32_t len = 2;
  for (size_t lo = size_t(leaves_) / 2; lo >= 1; lo /= 2, len *= 2)
    for (size_t i = lo; i < 2 * lo; ++i) pull(i, len);
}

void BlockPool::FreeRuns::pull(size_t i, int32_t len) {
  const size_t l = 2 * i, r = 2 * i + 1;
  const int32_t half = len / 2;
  const int32_t mid = int32_t(r * size_t(half) - size_t(leaves_));  // the right half's first block
  pre_[i] = pre_[l] == half ? half + pre_[r] : pre_[l];
  suf_[i] = suf_[r] == half ? half + suf_[l] : suf_[r];
  // The leftmost of equally long runs: in the left half, across the middle, in the right.
  best_[i] = best_[l];
  start_[i] = start_[l];
  if (suf_[l] + pre_[r] > best_[i]) {
    best_[i] = suf_[l] + pre_[r];
    start_[i] = mid - suf_[l];
  }
  if (best_[r] > best_[i]) {
    best_[i] = best_[r];
    start_[i] = start_[r];
  }
}

void BlockPool::FreeRuns::set(int32_t b, bool is_free) {
  size_t i = size_t(leaves_ + b);
  if ((pre_[i] != 0) == is_free) return;
  count_ += is_free ? 1 : -1;
  pre_[i] = suf_[i] = best_[i] = is_free ? 1 : 0;
  int32_t len = 2;
  for (i /= 2; i >= 1; i /= 2, len *= 2) pull(i, len);
}

int32_t BlockPool::FreeRuns::lowest_run(int32_t len) const {
  if (len < 1 || best_[1] < len) return -1;
  size_t i = 1;
  int32_t seg = leaves_;  // blocks under node i
  // Runs wholly in the left half come first, then the one across the middle, then the
  // right half; a run found this way starts after a block that is not free (or at 0).
  while (i < size_t(leaves_)) {
    const size_t l = 2 * i, r = l + 1;
    seg /= 2;
    if (best_[l] >= len) {
      i = l;
    } else if (suf_[l] + pre_[r] >= len) {
      return int32_t(r * size_t(seg) - size_t(leaves_)) - suf_[l];
    } else {
      i = r;
    }
  }
  return int32_t(i) - leaves_;
}

BlockPool::BlockPool(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size),
      ref_(size_t(n_blocks), 0),
      free_(n_blocks),
      hash_(size_t(n_blocks), 0),
      parent_(size_t(n_blocks), 0),
      registered_(size_t(n_blocks), 0),
      tokens_(size_t(n_blocks) * size_t(block_size), 0),
      prev_(size_t(n_blocks), -1),
      next_(size_t(n_blocks), -1) {
  TS_CHECK(n_blocks > 0 && block_size > 0);
}

void BlockPool::lru_push_back(int32_t b) {
  prev_[size_t(b)] = lru_tail_;
  next_[size_t(b)] = -1;
  if (lru_tail_ >= 0) next_[size_t(lru_tail_)] = b;
  else lru_head_ = b;
  lru_tail_ = b;
  ++n_cached_;
}

void BlockPool::lru_remove(int32_t b) {
  const int32_t p = prev_[size_t(b)], n = next_[size_t(b)];
  if (p >= 0) next_[size_t(p)] = n;
  else lru_head_ = n;
  if (n >= 0) prev_[size_t(n)] = p;
  else lru_tail_ = p;
  prev_[size_t(b)] = next_[size_t(b)] = -1;
  --n_cached_;
}

int32_t BlockPool::allocate(int32_t after) {
  int32_t b = -1;
  if (free_.count() > 0) {
    if (after >= 0 && after + 1 < n_blocks() && free_.free(after + 1)) {
      b = after + 1;
    } else if (const int32_t r = free_.lowest_run(2 * kGrowthBlocks + 1); r >= 0) {
      b = r == 0 ? 0 : r + kGrowthBlocks;
    } else {
      b = free_.longest_start() + free_.longest_len() / 2;
    }
    free_.set(b, false);
  } else if (lru_head_ >= 0) {
    b = lru_head_;
    lru_remove(b);
    drop_registration(b);
  } else {
    return -1;
  }
  ref_[size_t(b)] = 1;
  return b;
}

void BlockPool::retain(int32_t b) {
  TS_CHECK(b >= 0 && b < n_blocks() && ref_[size_t(b)] > 0);
  ++ref_[size_t(b)];
}

void BlockPool::release(int32_t b) {
  TS_CHECK(b >= 0 && b < n_blocks() && ref_[size_t(b)] > 0);
  if (--ref_[size_t(b)] > 0) return;
  if (registered_[size_t(b)]) lru_push_back(b);
  else free_.set(b, true);
}

int32_t BlockPool::find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const {
  auto [it, end] = table_.equal_range(hash);
  for (; it != end; ++it) {
    const int32_t b = it->second;
    if (parent_[size_t(b)] == parent &&
        std::equal(tokens.begin(), tokens.end(), tokens_.begin() + ptrdiff_t(size_t(b) * size_t(block_size_))))
      return b;
  }
  return -1;
}

bool BlockPool::register_block(int32_t b, uint64_t parent, std::span<const int32_t> tokens) {
  TS_CHECK(b >= 0 && b < n_blocks() && ref_[size_t(b)] > 0);
  TS_CHECK(int64_t(tokens.size()) == block_size_);
  if (registered_[size_t(b)]) return false;
  const uint64_t h = prefix_block_hash(parent, tokens);
  if (find(h, parent, tokens) >= 0) return false;
  hash_[size_t(b)] = h;
  parent_[size_t(b)] = parent;
  registered_[size_t(b)] = 1;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + ptrdiff_t(size_t(b) * size_t(block_size_)));
  table_.emplace(h, b);
  return true;
}

int32_t BlockPool::lookup(uint64_t parent, std::span<const int32_t> tokens) const {
  if (int64_t(tokens.size()) != block_size_) return -1;
  return find(prefix_block_hash(parent, tokens), parent, tokens);
}

int32_t BlockPool::acquire_cached(uint64_t parent, std::span<const int32_t> tokens) {
  TS_CHECK(int64_t(tokens.size()) == block_size_);
  const int32_t b = find(prefix_block_hash(parent, tokens), parent, tokens);
  if (b < 0) return -1;
  if (ref_[size_t(b)] == 0) lru_remove(b);
  ++ref_[size_t(b)];
  return b;
}

void BlockPool::unregister(int32_t b) {
  if (!registered_[size_t(b)]) return;
  drop_registration(b);
  if (ref_[size_t(b)] == 0) {  // a cached block: nothing references it any more
    lru_remove(b);
    free_.set(b, true);
  }
}

void BlockPool::drop_registration(int32_t b) {
  ++n_dropped_;
  auto [it, end] = table_.equal_range(hash_[size_t(b)]);
  for (; it != end; ++it)
    if (it->second == b) {
      table_.erase(it);
      break;
    }
  registered_[size_t(b)] = 0;
  hash_[size_t(b)] = parent_[size_t(b)] = 0;
}

void BlockPool::clear_cache() {
  while (lru_head_ >= 0) unregister(lru_head_);
}

bool BlockPool::check_consistency() const {
  int64_t n_used = 0, n_reg = 0;
  std::vector<uint8_t> seen(ref_.size(), 0);
  int32_t n_free = 0, run = 0, longest = 0;
  for (int32_t b = 0; b < n_blocks(); ++b) {
    run = free_.free(b) ? run + 1 : 0;
    longest = std::max(longest, run);
    if (!free_.free(b)) continue;
    if (ref_[size_t(b)] != 0 || registered_[size_t(b)]) return false;
    seen[size_t(b)] = 1;
    ++n_free;
  }
  if (n_free != free_.count() || longest != free_.longest_len()) return false;
  if (longest > 0) {
    for (int32_t b = free_.longest_start(); b < free_.longest_start() + longest; ++b)
      if (b >= n_blocks() || !free_.free(b)) return false;
  }
  // lowest_run against a scan, for a few lengths.
  for (int32_t len : {1, 2, 3, 2 * kGrowthBlocks + 1}) {
    int32_t want = -1;
    for (int32_t b = 0, run_start = 0, n = 0; b < n_blocks() && want < 0; ++b) {
      if (!free_.free(b)) {
        n = 0;
        continue;
      }
      if (n++ == 0) run_start = b;
      if (n >= len) want = run_start;
    }
    if (free_.lowest_run(len) != want) return false;
  }
  int32_t n_lru = 0, prev = -1;
  for (int32_t b = lru_head_; b >= 0; b = next_[size_t(b)]) {
    if (seen[size_t(b)] || ref_[size_t(b)] != 0 || !registered_[size_t(b)] || prev_[size_t(b)] != prev) return false;
    seen[size_t(b)] = 1;
    prev = b;
    if (++n_lru > n_blocks()) return false;
  }
  if (prev != lru_tail_ || n_lru != n_cached_) return false;
  for (int32_t b = 0; b < n_blocks(); ++b) {
    if (ref_[size_t(b)] < 0) return false;
    if (ref_[size_t(b)] > 0) {
      if (seen[size_t(b)]) return false;
      ++n_used;
    } else if (!seen[size_t(b)]) {
      return false;  // unreferenced but on neither list: leaked
    }
    if (registered_[size_t(b)]) ++n_reg;
  }
  return n_used == n_blocks() - int64_t(free_.count()) - n_cached_ && n_reg == int64_t(table_.size());
}

}  // namespace ts::kv
