#include "server/auth.h"

#include <gtest/gtest.h>

#include "server/sha256.h"

namespace ts::server {
namespace {

constexpr int64_t kSec = 1000000000;

KeyConfig key(const std::string& k, int64_t rpm, int64_t tpm, int32_t conc) {
  KeyConfig c;
  c.name = k;
  c.sha256 = sha256_hex(k);
  c.requests_per_min = rpm;
  c.tokens_per_min = tpm;
  c.max_concurrent = conc;
  return c;
}

TEST(Bearer, ParsesTheHeader) {
  EXPECT_EQ(bearer_token("Bearer abc").value(), "abc");
  EXPECT_EQ(bearer_token("bearer   abc  ").value(), "abc");
  EXPECT_EQ(bearer_token("BEARER\tabc").value(), "abc");
  EXPECT_FALSE(bearer_token("Basic abc").has_value());
  EXPECT_FALSE(bearer_token("Bearer").has_value());
  EXPECT_FALSE(bearer_token("Bearer ").has_value());
  EXPECT_FALSE(bearer_token("Bearerabc").has_value());
  EXPECT_FALSE(bearer_token("").has_value());
}

TEST(KeyTable, AuthenticatesByHash) {
  ManualClock clock;
  KeyTable t({key("sk-one", 0, 0, 0), key("sk-two", 0, 0, 0)}, clock);
  EXPECT_TRUE(t.enabled());
  ASSERT_NE(t.authenticate("Bearer sk-two"), nullptr);
  EXPECT_EQ(t.authenticate("Bearer sk-two")->config().name, "sk-two");
  EXPECT_EQ(t.authenticate("Bearer sk-three"), nullptr);
  EXPECT_EQ(t.authenticate("sk-one"), nullptr);
  EXPECT_FALSE(KeyTable({}, clock).enabled());
}

TEST(TokenBucket, RefillsContinuouslyUpToCapacity) {
  TokenBucket b(60, 0);  // 1 per second
  EXPECT_TRUE(b.try_take(60, 0));
  EXPECT_FALSE(b.try_take(1, 0));
  EXPECT_EQ(b.wait_ms(1, 0), 1000);
  EXPECT_FALSE(b.try_take(1, kSec / 2));
  EXPECT_EQ(b.wait_ms(1, kSec / 2), 500);
  EXPECT_TRUE(b.try_take(1, kSec));
  EXPECT_NEAR(b.available(100 * kSec), 60.0, 1e-9);  // capped
  EXPECT_EQ(b.wait_ms(61, 100 * kSec), -1);          // never
  b.give_back(10, 100 * kSec);
  EXPECT_NEAR(b.available(100 * kSec), 60.0, 1e-9);
  TokenBucket unlimited(0, 0);
  EXPECT_TRUE(unlimited.try_take(1e12, 0));
}

TEST(KeyState, RequestsPerMinute) {
  ManualClock clock;
  KeyState k(key("a", 2, 0, 0), clock);
  EXPECT_EQ(k.admit(10).verdict, LimitVerdict::kOk);
  k.release(0);
  const Admission second = k.admit(10);
  EXPECT_EQ(second.verdict, LimitVerdict::kOk);
  EXPECT_EQ(second.info.limit_requests, 2);
  EXPECT_EQ(second.info.remaining_requests, 0);
  EXPECT_EQ(second.info.reset_requests_ms, 60000);
  k.release(0);
  const Admission third = k.admit(10);
  EXPECT_EQ(third.verdict, LimitVerdict::kRequests);
  EXPECT_EQ(third.retry_after_ms, 30000);  // one request refills in 30 s at 2/min
  clock.advance_ns(30 * kSec);
  EXPECT_EQ(k.admit(10).verdict, LimitVerdict::kOk);
}

TEST(KeyState, TokensPerMinuteWithRefund) {
  ManualClock clock;
  KeyState k(key("a", 0, 100, 0), clock);
  EXPECT_EQ(k.admit(80).verdict, LimitVerdict::kOk);  // prompt + max_tokens
  const Admission a = k.admit(30);
  EXPECT_EQ(a.verdict, LimitVerdict::kTokens);
  EXPECT_EQ(a.info.remaining_tokens, 20);
  EXPECT_EQ(a.retry_after_ms, 6000);  // 10 tokens at 100/min
  k.release(50);                      // it used only 30 of its 80
  EXPECT_EQ(k.admit(30).verdict, LimitVerdict::kOk);
  // A request bigger than the whole minute can never pass: a clear message.
  const Admission big = k.admit(1000);
  EXPECT_EQ(big.verdict, LimitVerdict::kTokens);
  EXPECT_NE(big.message.find("lower max_tokens"), std::string::npos);
}

TEST(KeyState, ConcurrencyLimit) {
  ManualClock clock;
  KeyState k(key("a", 0, 0, 2), clock);
  EXPECT_EQ(k.admit(1).verdict, LimitVerdict::kOk);
  EXPECT_EQ(k.admit(1).verdict, LimitVerdict::kOk);
  EXPECT_EQ(k.admit(1).verdict, LimitVerdict::kConcurrent);
  EXPECT_EQ(k.in_flight(), 2);
  k.release(0);
  EXPECT_EQ(k.admit(1).verdict, LimitVerdict::kOk);
}

TEST(KeyState, ARefusedRequestChargesNothing) {
  ManualClock clock;
  KeyState k(key("a", 1, 100, 0), clock);
  EXPECT_EQ(k.admit(200).verdict, LimitVerdict::kTokens);  // refused on tokens...
  EXPECT_EQ(k.admit(50).verdict, LimitVerdict::kOk);       // ...so its request was not charged
}

TEST(KeyState, TierEntitlement) {
  ManualClock clock;
  KeyConfig c = key("a", 0, 0, 0);
  KeyState all(c, clock);
  EXPECT_TRUE(all.allows_tier("ultrafast"));
  c.tiers = {"standard", "batch"};
  KeyState some(c, clock);
  EXPECT_FALSE(some.allows_tier("ultrafast"));
  EXPECT_TRUE(some.allows_tier("batch"));
}

}  // namespace
}  // namespace ts::server
