// KvManager: reservations, commits, prefix reuse at plan time, copy-on-write after a
// fork, truncation, and a seeded random walk that keeps every count consistent.
#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/rng.h"
#include "testing/tokens.h"

namespace ts::kv {
namespace {

using testing::toks;

KvManager make(int32_t n_blocks, int32_t bs = 4) {
  KvOptions o;
  o.n_blocks = n_blocks;
  o.block_size = bs;
  return KvManager(o);
}

TEST(KvManager, ReserveCommitAndGiveBackWhatWasNotUsed) {
  KvManager m = make(8);
  ASSERT_TRUE(m.add(1, 0));
  EXPECT_FALSE(m.add(1, 0));
  EXPECT_EQ(m.blocks_needed(1, 9), 3);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.reserve(1, 9, &copies));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m.n_seq_blocks(1), 3);
  EXPECT_EQ(m.n_available(), 5);
  const std::vector<int32_t> t = toks(100, 9);
  m.commit(1, std::span<const int32_t>(t).first(5), 5);  // e.g. drafts rejected after 5
  EXPECT_EQ(m.n_computed(1), 5);
  EXPECT_EQ(m.n_seq_blocks(1), 2);
  EXPECT_EQ(m.n_available(), 6);
  EXPECT_TRUE(m.check_consistency());
  EXPECT_FALSE(m.reserve(1, 100, &copies));  // short: nothing changed
  EXPECT_EQ(m.n_seq_blocks(1), 2);
  EXPECT_TRUE(m.check_consistency());
}

TEST(KvManager, PrefixHitIsKnownBeforeAndTakenAtReuse) {
  KvManager m = make(16);
  const std::vector<int32_t> prompt = toks(7, 11);  // two full blocks and three tokens
  ASSERT_TRUE(m.add(1, 42));
  ASSERT_TRUE(m.reserve(1, 11, nullptr));
  m.commit(1, prompt, 11);
  m.remove(1);
  EXPECT_EQ(m.pool().n_cached(), 2);
  EXPECT_EQ(m.match_prefix(42, prompt, 1 << 20), 8);
  EXPECT_EQ(m.match_prefix(43, prompt, 1 << 20), 0);  // another isolation key
  EXPECT_EQ(m.match_prefix(42, prompt, 7), 4);        // a shorter context holds one block
  EXPECT_EQ(m.pool().n_cached(), 2);                  // matching takes nothing
  ASSERT_TRUE(m.add(2, 42));
  EXPECT_EQ(m.reuse_prefix(2, prompt, 1 << 20), 8);
  EXPECT_EQ(m.pool().n_cached(), 0);
  EXPECT_EQ(m.n_computed(2), 8);
  EXPECT_TRUE(m.check_consistency());
  // A whole-block prompt leaves its last token to compute.
  ASSERT_TRUE(m.add(3, 42));
  EXPECT_EQ(m.reuse_prefix(3, std::span<const int32_t>(prompt).first(8), 1 << 20), 4);
  EXPECT_TRUE(m.check_consistency());
}

// A probe resumes an earlier match: it sees blocks registered since, and starts over when
// a registration was dropped (a block reclaimed), never reporting a prefix that is gone.
TEST(KvManager, AProbeResumesAndStartsOverWhenABlockIsDropped) {
  KvManager m = make(4);
  const std::vector<int32_t> prompt = toks(3, 13);  // three full blocks of 4, then one token
  KvManager::PrefixProbe probe;
  ASSERT_TRUE(m.add(1, 0));
  ASSERT_TRUE(m.reserve(1, 4, nullptr));
  m.commit(1, std::span<const int32_t>(prompt).first(4), 4);
  EXPECT_EQ(m.match_prefix(0, prompt, 1 << 20, &probe), 4);
  ASSERT_TRUE(m.reserve(1, 4, nullptr));
  m.commit(1, std::span<const int32_t>(prompt).subspan(4, 4), 4);
  EXPECT_EQ(m.match_prefix(0, prompt, 1 << 20, &probe), 8);  // resumed: the new block found
  EXPECT_EQ(m.match_prefix(0, prompt, 1 << 20), 8);          // as a fresh match says
  m.remove(1);                                                // both blocks cached now
  ASSERT_TRUE(m.add(2, 0));
  ASSERT_TRUE(m.reserve(2, 16, nullptr));                     // reclaims both cached blocks
  EXPECT_EQ(m.match_prefix(0, prompt, 1 << 20, &probe), 0);
  EXPECT_EQ(m.match_prefix(0, prompt, 1 << 20), 0);
}

TEST(KvManager, ForkSharesAndTheWriterCopies) {
  KvManager m = make(8);
  ASSERT_TRUE(m.add(1, 0));
  ASSERT_TRUE(m.reserve(1, 6, nullptr));
  m.commit(1, toks(0, 6), 6);
  ASSERT_TRUE(m.fork(1, 2));
  EXPECT_EQ(m.n_available(), 6);
  EXPECT_EQ(m.blocks_needed(2, 1), 1);  // its partly filled last block is shared
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(m.reserve(2, 1, &copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, m.blocks(1)[1]);
  EXPECT_EQ(copies[0].dst, m.blocks(2)[1]);
  EXPECT_EQ(m.blocks(1)[0], m.blocks(2)[0]);  // the full block stays shared
  m.commit(2, toks(50, 1), 1);
  EXPECT_TRUE(m.check_consistency());
}

TEST(KvManager, CountOnlySequencesNeverRegister) {
  KvManager m = make(8);
  ASSERT_TRUE(m.add(1, 0, false));
  ASSERT_TRUE(m.reserve(1, 8, nullptr));
  m.commit(1, {}, 8);
  m.remove(1);
  EXPECT_EQ(m.pool().n_cached(), 0);
  EXPECT_EQ(m.n_available(), 8);
}

TEST(KvManager, RandomWalkKeepsEveryCount) {
  Rng rng(2026);
  KvManager m = make(24, 4);
  std::vector<SeqKey> live;
  SeqKey next = 1;
  std::vector<BlockCopy> copies;
  for (int i = 0; i < 4000; ++i) {
    const uint64_t op = rng.next_u64() % 7;
    if (op == 0 || live.empty()) {
      const SeqKey id = next++;
      m.add(id, rng.next_u64() % 2);
      m.reuse_prefix(id, toks(int32_t(rng.next_u64() % 3), 9), 1 << 20);
      live.push_back(id);
    } else {
      const SeqKey id = live[rng.next_u64() % live.size()];
      if (op <= 3) {
        const int64_t n = 1 + int64_t(rng.next_u64() % 6), at = m.n_computed(id);
        if (m.reserve(id, n, &copies)) {
          std::vector<int32_t> t;
          for (int64_t k = 0; k < n; ++k) t.push_back(int32_t((at + k) % 5));
          const int64_t keep = 1 + int64_t(rng.next_u64() % uint64_t(n));
          m.commit(id, std::span<const int32_t>(t).first(size_t(keep)), keep);
        }
      } else if (op == 4) {
        m.truncate(id, int64_t(rng.next_u64() % uint64_t(m.n_computed(id) + 1)));
      } else if (op == 5) {
        m.free(id);
      } else {
        if (rng.next_u64() % 2 && m.fork(id, next)) live.push_back(next++);
        else {
          m.remove(id);
          live.erase(std::find(live.begin(), live.end(), id));
        }
      }
    }
    ASSERT_TRUE(m.check_consistency()) << "after operation " << i;
  }
}

}  // namespace
}  // namespace ts::kv
