// BlockPool: allocation, sharing, the prefix cache and its LRU, and a seeded random
// property test that every reference taken is given back and the counts always add up.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/rng.h"
#include "testing/tokens.h"

namespace ts::kv {
namespace {

using testing::toks;

TEST(BlockPool, AllocateUntilNoRoomThenRelease) {
  BlockPool p(4, 16);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(p.allocate());
  EXPECT_EQ(p.allocate(), -1);  // no room is an answer
  EXPECT_EQ(p.n_used(), 4);
  EXPECT_EQ(p.n_available(), 0);
  for (int32_t b : got) p.release(b);
  EXPECT_EQ(p.n_free(), 4);
  EXPECT_TRUE(p.check_consistency());
}

TEST(BlockPool, SharedBlockFreedByLastHolder) {
  BlockPool p(2, 4);
  const int32_t b = p.allocate();
  p.retain(b);
  EXPECT_EQ(p.ref_count(b), 2);
  p.release(b);
  EXPECT_EQ(p.n_used(), 1);
  p.release(b);
  EXPECT_EQ(p.n_free(), 2);
}

TEST(BlockPool, CachedPrefixIsRevivedThenReclaimedLeastRecentFirst) {
  BlockPool p(3, 4);
  const uint64_t root = prefix_root_hash(7);
  const auto t0 = toks(10, 4), t1 = toks(20, 4);
  const int32_t a = p.allocate(), b = p.allocate();
  ASSERT_TRUE(p.register_block(a, root, t0));
  ASSERT_TRUE(p.register_block(b, prefix_block_hash(root, t0), t1));
  EXPECT_FALSE(p.register_block(a, root, t0));  // already registered
  p.release(b);  // tail first, as the engine does
  p.release(a);
  EXPECT_EQ(p.n_cached(), 2);
  EXPECT_EQ(p.n_used(), 0);

  // Same prefix: revived. Another key or another parent: no match.
  EXPECT_EQ(p.acquire_cached(prefix_root_hash(8), t0), -1);
  EXPECT_EQ(p.acquire_cached(root, t1), -1);
  EXPECT_EQ(p.acquire_cached(root, t0), a);
  EXPECT_EQ(p.n_cached(), 1);
  p.release(a);

  // Pressure: the free block goes first, then the cached block released longest ago (b).
  const int32_t x = p.allocate(), y = p.allocate();
  EXPECT_NE(x, a);
  EXPECT_EQ(y, b);
  EXPECT_FALSE(p.is_registered(b));
  EXPECT_EQ(p.acquire_cached(prefix_block_hash(root, t0), t1), -1);
  EXPECT_EQ(p.acquire_cached(root, t0), a);
  EXPECT_EQ(p.allocate(), -1);
  EXPECT_TRUE(p.check_consistency());
}

TEST(BlockPool, DuplicateContentIsNotRegisteredTwice) {
  BlockPool p(2, 2);
  const uint64_t root = prefix_root_hash(0);
  const auto t = toks(1, 2);
  const int32_t a = p.allocate(), b = p.allocate();
  EXPECT_TRUE(p.register_block(a, root, t));
  EXPECT_FALSE(p.register_block(b, root, t));
  p.release(a);
  p.release(b);
  EXPECT_EQ(p.n_cached(), 1);
  EXPECT_EQ(p.n_free(), 1);
  p.clear_cache();
  EXPECT_EQ(p.n_free(), 2);
  EXPECT_TRUE(p.check_consistency());
}

// Placement: a sequence's next block follows its last one while that is free; a new
// sequence starts in the lowest free run with room on both sides, kGrowthBlocks past the
// sequence before it, so sequences that grow in turns (a batch decoding) pack from the low
// end and each keep a contiguous run of kGrowthBlocks + 1 blocks before they must jump.
TEST(BlockPool, SequencesGrowingInTurnsStayContiguous) {
  constexpr int32_t G = BlockPool::kGrowthBlocks;
  BlockPool p(64, 16);
  const int32_t a0 = p.allocate();
  EXPECT_EQ(a0, 0);  // nothing before it
  const int32_t b0 = p.allocate();
  EXPECT_EQ(b0, 1 + G);  // room for a to grow
  const int32_t c0 = p.allocate();
  EXPECT_EQ(c0, b0 + 1 + G);
  std::vector<std::vector<int32_t>> seqs{{a0}, {b0}, {c0}};
  for (int step = 0; step < G; ++step)
    for (auto& s : seqs) s.push_back(p.allocate(s.back()));
  for (const auto& s : seqs)
    for (size_t i = 1; i < s.size(); ++i) EXPECT_EQ(s[i], s[i - 1] + 1) << "block " << i;
  // a's next block is b's first: a jumps to the lowest run with room, past c's growth.
  EXPECT_EQ(seqs[0].back() + 1, b0);
  const int32_t a_next = p.allocate(seqs[0].back());
  EXPECT_EQ(a_next, c0 + 1 + 2 * G);
  EXPECT_TRUE(p.check_consistency());
  // A small pool with no run of 2G + 1 blocks: the middle of the longest run.
  BlockPool q(10, 16);
  EXPECT_EQ(q.allocate(), 5);
  EXPECT_TRUE(q.check_consistency());
}

TEST(BlockPool, FreedBlocksRejoinTheirRun) {
  BlockPool p(10, 4);
  std::vector<int32_t> all;
  for (int i = 0; i < 10; ++i) all.push_back(p.allocate(all.empty() ? -1 : all.back()));
  EXPECT_EQ(all, (std::vector<int32_t>{5, 6, 7, 8, 9, 2, 3, 4, 1, 0}));  // halving the free runs
  EXPECT_EQ(p.allocate(), -1);
  // Free 2..6 out of order: one run of 5, which the next new sequence starts in the middle of.
  for (int32_t b : {4, 2, 6, 3, 5}) p.release(b);
  EXPECT_TRUE(p.check_consistency());
  EXPECT_EQ(p.allocate(), 4);
  EXPECT_EQ(p.allocate(4), 5);
  EXPECT_EQ(p.allocate(9), 3);  // past the pool's end: the middle of the longest free run, [2, 4)
  EXPECT_TRUE(p.check_consistency());
}

// Random allocate / retain / release / register / acquire / unregister; holders are lists
// of references. At the end every holder releases: the pool must be all free or cached.
TEST(BlockPool, RandomOperationsNeverLeak) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Rng rng(seed);
    BlockPool p(32, 4);
    std::vector<int32_t> held;  // one entry per reference we hold
    const uint64_t root = prefix_root_hash(seed);
    for (int op = 0; op < 4000; ++op) {
      const uint64_t k = rng.next_u64() % 6;
      if (k == 0) {
        // Half the time after a held block (a sequence growing), as the engine asks.
        const int32_t after = !held.empty() && rng.next_u64() % 2 ? held[rng.next_u64() % held.size()] : -1;
        const int32_t b = p.allocate(after);
        if (b >= 0) {
          held.push_back(b);
        } else {
          EXPECT_EQ(p.n_available(), 0);
        }
      } else if (k == 1 && !held.empty()) {
        const int32_t b = held[rng.next_u64() % held.size()];
        p.retain(b);
        held.push_back(b);
      } else if (k == 2 && !held.empty()) {
        const size_t i = rng.next_u64() % held.size();
        p.release(held[i]);
        held.erase(held.begin() + ptrdiff_t(i));
      } else if (k == 3 && !held.empty()) {
        const int32_t v = int32_t(rng.next_u64() % 8);
        p.register_block(held[rng.next_u64() % held.size()], root, toks(v, 4));
      } else if (k == 4) {
        const int32_t b = p.acquire_cached(root, toks(int32_t(rng.next_u64() % 8), 4));
        if (b >= 0) held.push_back(b);
      } else if (k == 5 && !held.empty()) {
        p.unregister(held[rng.next_u64() % held.size()]);
      }
      ASSERT_EQ(p.n_free() + p.n_cached() + p.n_used(), p.n_blocks());
      if (op % 97 == 0 || p.n_blocks() - p.n_used() < 3) {
        ASSERT_TRUE(p.check_consistency()) << "seed " << seed << " op " << op;
      }
    }
    for (int32_t b : held) p.release(b);
    EXPECT_EQ(p.n_used(), 0) << "seed " << seed;
    EXPECT_TRUE(p.check_consistency());
    p.clear_cache();
    EXPECT_EQ(p.n_free(), p.n_blocks());
  }
}

}  // namespace
}  // namespace ts::kv
