// KV block accounting for the paged batching engine: which blocks of the KV cache are
// free, referenced by sequences, or kept as a reusable prefix (no tensors here; this
// header depends only on the standard library: the `kv` layer is shared by the engine and
// the scheduler, see docs/architecture.md).
//
// A block is in exactly one of three states:
//   free    - holds nothing useful; on the free list.
//   used    - referenced by >= 1 sequences (ref_count > 0). Several references mean the
//             block is shared (a fork, or a prefix reused from the cache): writers must
//             copy it first (copy-on-write, done by the engine).
//   cached  - unreferenced but registered in the prefix cache: it holds the KV of a full
//             block of tokens after a known prefix. It can be revived by a sequence with
//             the same prefix, or reclaimed by allocate() in least-recently-released order.
// n_free() + n_cached() + n_used() == n_blocks() always.
//
// Prefix identity: block i of a sequence is named by a chained hash of (isolation key,
// tokens of blocks 0..i); the pool also stores each registered block's tokens and parent
// hash and compares them on lookup, so handing out wrong KV would take a collision of the
// block hash and of the parent hash at once (2^-128), not just one 64-bit collision.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace ts::kv {

// The chained hash of a block: `parent` is the previous block's hash, and for block 0 the
// root hash of the isolation key, so equal text under different keys never matches.
uint64_t prefix_root_hash(uint64_t isolation_key);
uint64_t prefix_block_hash(uint64_t parent, std::span<const int32_t> tokens);

class BlockPool {
 public:
  BlockPool(int32_t n_blocks, int32_t block_size);

  int32_t n_blocks() const { return int32_t(ref_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t n_free() const { return free_.count(); }
  int32_t n_cached() const { return n_cached_; }
  int32_t n_used() const { return n_blocks() - n_free() - n_cached(); }
  // Blocks allocate() can hand out now (free, or cached and reclaimable).
  int32_t n_available() const { return n_free() + n_cached(); }

  // A block to write into, with ref_count 1: a free one, else the cached block released
  // longest ago (its registration dropped). -1 when every block is referenced: "no room"
  // is an ordinary answer, never a crash.
  // Placement: block after + 1 when it is free (pass a sequence's last block, so that its
  // cells continue in one run of memory, which the hardware prefetchers stream through;
  // blocks scattered every 16 cells made 16-sequence decode attention ~13% slower).
  // Otherwise the lowest free run with room for kGrowthBlocks on either side, kGrowthBlocks
  // past its start (room for the sequence before it to grow) or at block 0: sequences
  // pack from the low end, so a lightly used cache touches few pages. Failing that, the
  // middle of the longest free run.
  int32_t allocate(int32_t after = -1);
  static constexpr int32_t kGrowthBlocks = 8;
  void retain(int32_t b);
  // Drops one reference; at zero the block becomes cached when registered, else free.
  void release(int32_t b);
  int32_t ref_count(int32_t b) const { return ref_[size_t(b)]; }

  // Prefix cache. register_block names used block `b` as holding `tokens` (block_size of
  // them) after the prefix whose hash is `parent`; false when another block already holds
  // that prefix (b then stays unregistered and is simply freed when released).
  bool register_block(int32_t b, uint64_t parent, std::span<const int32_t> tokens);
  // The block holding `tokens` after `parent`, retained for the caller; -1 when none.
  int32_t acquire_cached(uint64_t parent, std::span<const int32_t> tokens);
  // The block holding `tokens` after `parent`, without retaining it; -1 when none.
  int32_t lookup(uint64_t parent, std::span<const int32_t> tokens) const;
  // Forgets b's registration (its contents are about to change).
  void unregister(int32_t b);
  bool is_registered(int32_t b) const { return registered_[size_t(b)] != 0; }
  // Registrations dropped so far (reclaimed, unregistered, cleared): while it stays the
  // same, every block registered before is still findable (a prefix match can resume).
  uint64_t n_dropped() const { return n_dropped_; }
  // Drops every cached block (they become free); used blocks keep their registration.
  void clear_cache();

  // Checks every invariant (counts, lists, table); for tests. Returns false on a violation.
  bool check_consistency() const;

 private:
  void lru_push_back(int32_t b);
  void lru_remove(int32_t b);
  void drop_registration(int32_t b);  // table entry only; the caller fixes the lists
  int32_t find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens) const;

  // Which blocks are free, with the longest run of free blocks at hand: a segment tree
  // over the blocks (O(log n) per change, O(1) per query).
  class FreeRuns {
   public:
    explicit FreeRuns(int32_t n);  // all free
    bool free(int32_t b) const { return pre_[size_t(leaves_ + b)] != 0; }
    void set(int32_t b, bool is_free);
    int32_t count() const { return count_; }
    int32_t longest_start() const { return start_[1]; }
    int32_t longest_len() const { return best_[1]; }
    // The first block of the lowest run of at least len free blocks; -1 when none.
    int32_t lowest_run(int32_t len) const;

   private:
    void pull(size_t i, int32_t len);
    int32_t leaves_, count_;
    // Per node: free prefix, free suffix, longest free run and its first block.
    std::vector<int32_t> pre_, suf_, best_, start_;
  };

  int32_t block_size_;
  std::vector<int32_t> ref_;
  FreeRuns free_;
  // Registration: hash, parent hash and tokens of each registered block.
  std::vector<uint64_t> hash_, parent_;
  std::vector<uint8_t> registered_;
  std::vector<int32_t> tokens_;    // n_blocks x block_size
  std::unordered_multimap<uint64_t, int32_t> table_;  // hash -> registered block
  // Cached blocks, least recently released first (intrusive doubly linked list).
  std::vector<int32_t> prev_, next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  int32_t n_cached_ = 0;
  uint64_t n_dropped_ = 0;
};

}  // namespace ts::kv
