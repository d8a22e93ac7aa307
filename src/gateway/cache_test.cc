// The response cache's store: hits and misses, the time to live, LRU eviction by bytes, an
// entry larger than the whole cache, replacement.
#include "gateway/cache.h"

#include <gtest/gtest.h>

namespace ts::gateway {
namespace {

CachedAnswer answer(const std::string& text) { return CachedAnswer{text, "stop", 3, int64_t(text.size())}; }

TEST(ResponseCache, HitsExpireAndTheLeastRecentlyUsedGoesFirst) {
  ManualClock clock;
  constexpr int64_t kMs = 1000000;
  ResponseCache c(1000, 50, clock);  // 1000 bytes, 50 ms
  EXPECT_FALSE(c.get("a"));
  c.put("a", answer(std::string(100, 'a')));
  auto hit = c.get("a");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->text, std::string(100, 'a'));
  EXPECT_EQ(hit->finish_reason, "stop");
  EXPECT_EQ(hit->completion_tokens, 100);
  clock.advance_ns(51 * kMs);  // past its time to live
  EXPECT_FALSE(c.get("a"));
  ResponseCache::Stats s = c.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.expired, 1);
  EXPECT_EQ(s.entries, 0);
  EXPECT_EQ(s.bytes, 0);
  // Room for about three of these: the least recently used leaves first.
  c.put("x", answer(std::string(200, 'x')));
  c.put("y", answer(std::string(200, 'y')));
  c.put("z", answer(std::string(200, 'z')));
  EXPECT_TRUE(c.get("x"));  // x is now the most recent
  c.put("w", answer(std::string(200, 'w')));
  s = c.stats();
  EXPECT_GE(s.evictions, 1);
  EXPECT_LE(s.bytes, 1000);
  EXPECT_FALSE(c.get("y"));  // the least recently used
  EXPECT_TRUE(c.get("x"));
  EXPECT_TRUE(c.get("w"));
  // Larger than the whole cache: not kept, nothing else dropped for it.
  const int64_t before = c.stats().entries;
  c.put("huge", answer(std::string(5000, 'h')));
  EXPECT_FALSE(c.get("huge"));
  EXPECT_EQ(c.stats().entries, before);
  // The same key again replaces the entry.
  c.put("w", answer("new"));
  EXPECT_EQ(c.get("w")->text, "new");
}

}  // namespace
}  // namespace ts::gateway
