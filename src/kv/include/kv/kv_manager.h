// The one owner of KV block allocation: sequences' block tables over a BlockPool, prefix
// reuse, copy-on-write and the registration of full blocks. Standard library only, so the
// scheduler owns one (it allocates while it plans, knows prefix hits at plan time and
// preempts on the spot, as vLLM's KVCacheManager does) and the engine owns one only for
// callers that drive it without a scheduler (tools, tests). The engine itself just maps
// the block tables it is given onto its KV tensors (ops/kv_cache.h).
//
// A sequence's life here:
//   add -> [reuse_prefix] -> (reserve -> commit | release_unused)... -> remove
//   free                                 preemption: every block released, n_computed 0
//   fork                                 shares src's blocks (copied on the first write)
//   truncate                             drops tokens after n_keep (rejected drafts)
// reserve(n) makes room for n more tokens after n_computed and lists the blocks the
// caller must copy first (a shared partly filled last block); commit(n) then appends the
// n tokens actually computed (<= the reservation), registers the blocks they filled and
// gives back the blocks the reservation did not use. A sequence added without token ids
// (`hashable` false, e.g. a scheduler test that plans counts) is counted the same way but
// never registers or reuses a prefix.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/blocks.h"

namespace ts::kv {

using SeqKey = uint64_t;

struct KvOptions {
  int32_t n_blocks = 1;
  int32_t block_size = 16;
  bool prefix_cache = true;
  // Reuse prefixes across isolation keys (one shared cache); off: only within a key.
  bool share_prefixes = false;
};

// Block `src` must be copied to block `dst` before the step writes into `dst`.
struct BlockCopy {
  int32_t src = -1, dst = -1;
};

class KvManager {
 public:
  explicit KvManager(const KvOptions& o);

  const KvOptions& options() const { return opts_; }
  int32_t block_size() const { return opts_.block_size; }
  const BlockPool& pool() const { return pool_; }
  int32_t n_blocks() const { return pool_.n_blocks(); }
  // Blocks reserve() can take now (free, or cached and reclaimable).
  int32_t n_available() const { return pool_.n_available(); }

  // False when `id` is known already.
  bool add(SeqKey id, uint64_t isolation_key, bool hashable = true);
  bool contains(SeqKey id) const { return seqs_.count(id) != 0; }
  // dst shares src's blocks and history (false: src unknown or dst known).
  bool fork(SeqKey src, SeqKey dst);
  // Releases every block (full ones stay cached); n_computed becomes 0.
  void free(SeqKey id);
  void remove(SeqKey id);

  int64_t n_computed(SeqKey id) const;
  int32_t n_seq_blocks(SeqKey id) const;
  std::span<const int32_t> blocks(SeqKey id) const;
  // The tokens whose KV is held (hashable sequences only; empty otherwise).
  std::span<const int32_t> tokens(SeqKey id) const;

  // Full blocks of `tokens` the cache holds now for a sequence under `isolation_key`,
  // in tokens, leaving at least the last token to compute (it yields the logits) and at
  // most max_tokens. Nothing is retained: a planner's estimate.
  int64_t match_prefix(uint64_t isolation_key, std::span<const int32_t> tokens, int64_t max_tokens) const;
  // The same, resuming from an earlier match of the same tokens when no registration was
  // dropped since (a planner asks every step while a request waits: the blocks it matched
  // before are still there, so only the blocks after them are hashed again).
  struct PrefixProbe {
    int64_t n_tokens = 0;   // matched so far
    uint64_t parent = 0;    // the chained hash after them
    uint64_t n_dropped = ~uint64_t(0);  // BlockPool::n_dropped() then; ~0: none yet
  };
  int64_t match_prefix(uint64_t isolation_key, std::span<const int32_t> tokens, int64_t max_tokens,
                       PrefixProbe* probe) const;
  // For a sequence holding nothing: attaches those cached blocks. Returns n_computed.
  int64_t reuse_prefix(SeqKey id, std::span<const int32_t> tokens, int64_t max_tokens);

  // Blocks appending n_new tokens would take now (new ones + a copy-on-write); -1: unknown.
  int64_t blocks_needed(SeqKey id, int64_t n_new) const;
  // Room for n_new tokens after n_computed; false (nothing changed) when the pool is short.
  // Copies the caller must make before writing are appended to `copies` (may be null when
  // the caller knows there are none, e.g. without fork or prefix reuse: checked).
  bool reserve(SeqKey id, int64_t n_new, std::vector<BlockCopy>* copies);
  // The first n of the reserved tokens were computed: `tokens` are their ids (size n), or
  // empty for a sequence without ids. Registers newly full blocks and releases the blocks
  // beyond the last computed token.
  void commit(SeqKey id, std::span<const int32_t> tokens, int64_t n);
  // Releases blocks beyond the last computed token (a reservation the step did not use).
  void release_unused(SeqKey id);
  // Keeps the first n_keep tokens (<= n_computed).
  void truncate(SeqKey id, int64_t n_keep);

  void clear_cache() { pool_.clear_cache(); }
  // The pool's invariants, and every block's count equals the references sequences hold.
  bool check_consistency() const;

 private:
  struct Seq {
    uint64_t isolation_key = 0;
    bool hashable = true;
    int64_t n_computed = 0;
    std::vector<int32_t> blocks;    // position p lives in blocks[p / block_size]
    std::vector<int32_t> tokens;    // hashable: the n_computed token ids
    std::vector<uint64_t> hashes;   // chained prefix hash of each registered full block
  };
  uint64_t root_hash(uint64_t isolation_key) const;
  void release_from(Seq& s, size_t keep_blocks);
  void register_full_blocks(Seq& s);
  Seq* find(SeqKey id);
  const Seq* find(SeqKey id) const;

  KvOptions opts_;
  BlockPool pool_;
  std::unordered_map<SeqKey, Seq> seqs_;
};

}  // namespace ts::kv
