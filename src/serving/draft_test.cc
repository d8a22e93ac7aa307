#include "draft.h"

#include <gtest/gtest.h>

#include <vector>

namespace ts::serving {
namespace {

using V = std::vector<int32_t>;

TEST(Drafts, ContinueTheMostRecentEarlierOccurrenceOfTheLongestSuffix) {
  DraftOptions o;
  // "... 5 6 7 8 9 ... 5 6 7" -> 8 9 ... (the 3-gram 5 6 7 matched).
  EXPECT_EQ(propose_drafts(V{1, 5, 6, 7, 8, 9, 10, 11, 2, 5, 6, 7}, o), (V{8, 9, 10, 11}));
  // Two occurrences: the most recent one wins.
  EXPECT_EQ(propose_drafts(V{6, 7, 1, 1, 6, 7, 2, 2, 6, 7}, o), (V{2, 2, 6, 7}));
  // Longest first: the 3-gram 4 6 7 beats a more recent 2-gram 6 7.
  EXPECT_EQ(propose_drafts(V{4, 6, 7, 20, 6, 7, 30, 4, 6, 7}, o), (V{20, 6, 7, 30}));
  // Never more than what follows, nor more than max_drafts.
  EXPECT_EQ(propose_drafts(V{3, 4, 9, 3, 4}, o), (V{9, 3, 4}));
  o.max_drafts = 2;
  EXPECT_EQ(propose_drafts(V{1, 5, 6, 7, 8, 9, 10, 2, 5, 6, 7}, o), (V{8, 9}));
}

TEST(Drafts, RepeatedTokenOverlapsItsOwnSuffix) {
  DraftOptions o;
  EXPECT_EQ(propose_drafts(V{9, 9, 9, 9}, o), (V{9}));
  EXPECT_EQ(propose_drafts(V{1, 2, 1, 2, 1, 2}, o), (V{1, 2}));
}

TEST(Drafts, NothingWithoutAMatchOrWithBadOptions) {
  DraftOptions o;
  EXPECT_TRUE(propose_drafts(V{}, o).empty());
  EXPECT_TRUE(propose_drafts(V{1}, o).empty());
  EXPECT_TRUE(propose_drafts(V{1, 2, 3, 4, 5}, o).empty());
  EXPECT_TRUE(propose_drafts(V{1, 2, 3, 1}, o).empty());  // a 1-gram is below min_ngram 2
  o.min_ngram = 1;
  EXPECT_EQ(propose_drafts(V{1, 2, 3, 1}, o), (V{2, 3, 1}));
  o.max_drafts = 0;
  EXPECT_TRUE(propose_drafts(V{1, 2, 1, 2}, o).empty());
  o = DraftOptions{};
  o.max_ngram = 1;  // below min_ngram
  EXPECT_TRUE(propose_drafts(V{1, 2, 1, 2}, o).empty());
}

}  // namespace
}  // namespace ts::serving
