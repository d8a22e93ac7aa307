#include "kv/kv_manager.h"

#include <algorithm>

#include "core/check.h"

namespace ts::kv {

KvManager::KvManager(const KvOptions& o) : opts_(o), pool_(o.n_blocks, o.block_size) {}

KvManager::Seq* KvManager::find(SeqKey id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

const KvManager::Seq* KvManager::find(SeqKey id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

uint64_t KvManager::root_hash(uint64_t isolation_key) const {
  return prefix_root_hash(opts_.share_prefixes ? 0 : isolation_key);
}

bool KvManager::add(SeqKey id, uint64_t isolation_key, bool hashable) {
  if (seqs_.count(id)) return false;
  Seq& s = seqs_[id];
  s.isolation_key = isolation_key;
  s.hashable = hashable;
  return true;
}

bool KvManager::fork(SeqKey src, SeqKey dst) {
  const Seq* s = find(src);
  if (!s || seqs_.count(dst)) return false;
  Seq d = *s;  // the shared KV was computed under src's key
  for (int32_t b : d.blocks) pool_.retain(b);
  seqs_.emplace(dst, std::move(d));
  return true;
}

void KvManager::release_from(Seq& s, size_t keep_blocks) {
  // Tail first: among blocks that become cached, a sequence's later blocks are reclaimed
  // before its earlier ones (an early block is useful to more future prompts).
  while (s.blocks.size() > keep_blocks) {
    pool_.release(s.blocks.back());
    s.blocks.pop_back();
  }
}

void KvManager::free(SeqKey id) {
  Seq* s = find(id);
  if (!s) return;
  release_from(*s, 0);
  s->n_computed = 0;
  s->tokens.clear();
  s->hashes.clear();
}

void KvManager::remove(SeqKey id) {
  Seq* s = find(id);
  if (!s) return;
  release_from(*s, 0);
  seqs_.erase(id);
}

int64_t KvManager::n_computed(SeqKey id) const {
  const Seq* s = find(id);
  return s ? s->n_computed : 0;
}

int32_t KvManager::n_seq_blocks(SeqKey id) const {
  const Seq* s = find(id);
  return s ? int32_t(s->blocks.size()) : 0;
}

std::span<const int32_t> KvManager::blocks(SeqKey id) const {
  const Seq* s = find(id);
  return s ? std::span<const int32_t>(s->blocks) : std::span<const int32_t>();
}

std::span<const int32_t> KvManager::tokens(SeqKey id) const {
  const Seq* s = find(id);
  return s ? std::span<const int32_t>(s->tokens) : std::span<const int32_t>();
}

int64_t KvManager::match_prefix(uint64_t isolation_key, std::span<const int32_t> tokens, int64_t max_tokens) const {
  PrefixProbe probe;
  return match_prefix(isolation_key, tokens, max_tokens, &probe);
}

int64_t KvManager::match_prefix(uint64_t isolation_key, std::span<const int32_t> tokens, int64_t max_tokens,
                                PrefixProbe* probe) const {
  if (!opts_.prefix_cache || tokens.size() < 2) return 0;
  const int64_t bs = opts_.block_size;
  const int64_t n_full = std::min<int64_t>((int64_t(tokens.size()) - 1) / bs, max_tokens / bs);
  if (probe->n_dropped != pool_.n_dropped() || probe->n_tokens > n_full * bs) {
    probe->n_tokens = 0;
    probe->parent = root_hash(isolation_key);
    probe->n_dropped = pool_.n_dropped();
  }
  for (int64_t i = probe->n_tokens / bs; i < n_full; ++i) {
    const std::span<const int32_t> blk = tokens.subspan(size_t(i * bs), size_t(bs));
    if (pool_.lookup(probe->parent, blk) < 0) break;
    probe->parent = prefix_block_hash(probe->parent, blk);
    probe->n_tokens = (i + 1) * bs;
  }
  return probe->n_tokens;
}

int64_t KvManager::reuse_prefix(SeqKey id, std::span<const int32_t> tokens, int64_t max_tokens) {
  Seq* s = find(id);
  if (!s || s->n_computed != 0 || !s->hashable || !opts_.prefix_cache || tokens.size() < 2) return s ? s->n_computed : 0;
  const int64_t bs = opts_.block_size;
  const int64_t n_full = std::min<int64_t>((int64_t(tokens.size()) - 1) / bs, max_tokens / bs);
  uint64_t parent = root_hash(s->isolation_key);
  for (int64_t i = 0; i < n_full; ++i) {
    const std::span<const int32_t> blk = tokens.subspan(size_t(i * bs), size_t(bs));
    const int32_t b = pool_.acquire_cached(parent, blk);
    if (b < 0) break;
    parent = prefix_block_hash(parent, blk);
    s->blocks.push_back(b);
    s->hashes.push_back(parent);
    s->tokens.insert(s->tokens.end(), blk.begin(), blk.end());
  }
  s->n_computed = int64_t(s->tokens.size());
  return s->n_computed;
}

int64_t KvManager::blocks_needed(SeqKey id, int64_t n_new) const {
  const Seq* s = find(id);
  if (!s) return -1;
  const int64_t bs = opts_.block_size, p0 = s->n_computed;
  int64_t need = blocks_for_tokens(p0 + n_new, opts_.block_size) - int64_t(s->blocks.size());
  if (p0 % bs != 0 && n_new > 0 && pool_.ref_count(s->blocks[size_t(p0 / bs)]) > 1) ++need;
  return std::max<int64_t>(0, need);
}

bool KvManager::reserve(SeqKey id, int64_t n_new, std::vector<BlockCopy>* copies) {
  Seq* s = find(id);
  if (!s || n_new < 0) return false;
  const int64_t bs = opts_.block_size, p0 = s->n_computed;
  int64_t need = blocks_for_tokens(p0 + n_new, opts_.block_size) - int64_t(s->blocks.size());
  const bool partial = p0 % bs != 0 && n_new > 0;
  const bool shared = partial && pool_.ref_count(s->blocks[size_t(p0 / bs)]) > 1;
  if (std::max<int64_t>(0, need) + (shared ? 1 : 0) > pool_.n_available()) return false;
  if (partial) {
    int32_t& b = s->blocks[size_t(p0 / bs)];
    if (shared) {  // copy-on-write: the other holders keep the original
      TS_CHECK(copies != nullptr);
      const int32_t nb = pool_.allocate(p0 / bs > 0 ? s->blocks[size_t(p0 / bs - 1)] : -1);
      TS_CHECK(nb >= 0);
      copies->push_back({b, nb});
      pool_.release(b);
      b = nb;
    } else {
      pool_.unregister(b);  // ours alone, about to be overwritten (after a truncate)
    }
  }
  for (; need > 0; --need) {
    const int32_t nb = pool_.allocate(s->blocks.empty() ? -1 : s->blocks.back());
    TS_CHECK(nb >= 0);
    s->blocks.push_back(nb);
  }
  return true;
}

void KvManager::register_full_blocks(Seq& s) {
  if (!opts_.prefix_cache || !s.hashable) return;
  const size_t bs = size_t(opts_.block_size);
  while (s.hashes.size() < s.tokens.size() / bs) {
    const size_t i = s.hashes.size();
    const uint64_t parent = i ? s.hashes[i - 1] : root_hash(s.isolation_key);
    const std::span<const int32_t> blk(s.tokens.data() + i * bs, bs);
    pool_.register_block(s.blocks[i], parent, blk);  // false: an equal block is cached already
    s.hashes.push_back(prefix_block_hash(parent, blk));
  }
}

void KvManager::commit(SeqKey id, std::span<const int32_t> tokens, int64_t n) {
  Seq* s = find(id);
  if (!s) return;
  TS_CHECK(n >= 0 && s->n_computed + n <= int64_t(s->blocks.size()) * opts_.block_size);
  if (s->hashable && int64_t(tokens.size()) == n) {
    s->tokens.insert(s->tokens.end(), tokens.begin(), tokens.end());
  } else if (s->hashable) {  // ids unknown from here on: count only
    s->hashable = false;
    s->tokens.clear();
  }
  s->n_computed += n;
  release_unused(id);
  register_full_blocks(*s);
}

void KvManager::release_unused(SeqKey id) {
  Seq* s = find(id);
  if (!s) return;
  release_from(*s, size_t(blocks_for_tokens(s->n_computed, opts_.block_size)));
}

void KvManager::truncate(SeqKey id, int64_t n_keep) {
  Seq* s = find(id);
  if (!s) return;
  TS_CHECK(n_keep >= 0 && n_keep <= s->n_computed);
  const int64_t bs = opts_.block_size;
  release_from(*s, size_t(blocks_for_tokens(n_keep, opts_.block_size)));
  s->n_computed = n_keep;
  if (s->hashable) s->tokens.resize(size_t(n_keep));
  s->hashes.resize(std::min(s->hashes.size(), size_t(n_keep / bs)));
  // A kept partial block may still be registered (it was full): reserve() unregisters or
  // copies it before the next write.
}

bool KvManager::check_consistency() const {
  if (!pool_.check_consistency()) return false;
  std::vector<int32_t> refs(size_t(pool_.n_blocks()), 0);
  for (const auto& [id, s] : seqs_) {
    if (int64_t(s.blocks.size()) != blocks_for_tokens(s.n_computed, opts_.block_size)) return false;
    if (s.hashable && int64_t(s.tokens.size()) != s.n_computed) return false;
    for (int32_t b : s.blocks) ++refs[size_t(b)];
  }
  for (int32_t b = 0; b < pool_.n_blocks(); ++b)
    if (refs[size_t(b)] != pool_.ref_count(b)) return false;
  return true;
}

}  // namespace ts::kv
