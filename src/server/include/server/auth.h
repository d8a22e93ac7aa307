// API keys and their limits. A bearer token is hashed (SHA-256) and looked up among the
// configured hashes; each key has token buckets for requests/min and tokens/min and a
// count of requests in flight. Time comes from an injected Clock so tests drive it.
//
// Token buckets: capacity = the per-minute limit, refilled continuously at limit/60 per
// second, so a key may burst its whole minute and then proceeds at the steady rate.
// Tokens are charged at admission as prompt + max_tokens (the most the request can use)
// and what the request did not use is refunded when it ends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "sched/tier_policy.h"
#include "server/config.h"

namespace ts::server {

class TokenBucket {
 public:
  // capacity 0: unlimited.
  TokenBucket(int64_t per_min, int64_t now_ns);
  bool unlimited() const { return capacity_ <= 0; }
  int64_t capacity() const { return capacity_; }
  // Takes n if available and returns true; else returns false and takes nothing.
  bool try_take(double n, int64_t now_ns);
  void give_back(double n, int64_t now_ns);
  double available(int64_t now_ns);
  // Milliseconds until n are available (0 when they are now; -1 when n > capacity: never).
  int64_t wait_ms(double n, int64_t now_ns);
  // Milliseconds until the bucket is full again.
  int64_t reset_ms(int64_t now_ns);

 private:
  void refill(int64_t now_ns);
  int64_t capacity_;
  double level_;
  int64_t last_ns_;
};

// What the x-ratelimit-* headers report after an admission decision.
struct RateLimitInfo {
  int64_t limit_requests = 0, remaining_requests = 0, reset_requests_ms = 0;
  int64_t limit_tokens = 0, remaining_tokens = 0, reset_tokens_ms = 0;
};

enum class LimitVerdict : uint8_t {
  kOk,
  kRequests,    // requests/min exhausted
  kTokens,      // tokens/min exhausted (or the request alone exceeds it)
  kConcurrent,  // max_concurrent requests in flight
};

struct Admission {
  LimitVerdict verdict = LimitVerdict::kOk;
  int64_t retry_after_ms = 0;
  std::string message;
  RateLimitInfo info;
};

// One configured key and its live limit state. Thread-safe.
class KeyState {
 public:
  KeyState(KeyConfig cfg, const Clock& clock);
  const KeyConfig& config() const { return cfg_; }
  bool has_limits() const { return cfg_.requests_per_min > 0 || cfg_.tokens_per_min > 0 || cfg_.max_concurrent > 0; }
  bool allows_tier(const std::string& tier) const;
  // The entitlement rule (sched::entitlement_move) for this key and a request of tier rank
  // `requested`: kStay, kToTier (the best allowed one below it, else the key's default
  // tier, else its best one) or kReject when `reject`. `tiers`: the tier names by rank.
  sched::Move entitlement(sched::TierId requested, const std::vector<std::string>& tiers, bool reject) const;

  // Charges one request and `tokens`, and takes a concurrency slot, or charges nothing.
  Admission admit(int64_t tokens);
  // The request ended: frees its slot and refunds tokens it did not use.
  void release(int64_t unused_tokens);
  int32_t in_flight() const;

 private:
  RateLimitInfo info_locked(int64_t now);
  KeyConfig cfg_;
  const Clock& clock_;
  mutable std::mutex mu_;
  TokenBucket requests_;  // GUARDED_BY(mu_)
  TokenBucket tokens_;    // GUARDED_BY(mu_)
  int32_t in_flight_ = 0; // GUARDED_BY(mu_)
};

class KeyTable {
 public:
  KeyTable(const std::vector<KeyConfig>& keys, const Clock& clock);
  bool enabled() const { return !keys_.empty(); }
  // The key for an Authorization header value ("Bearer KEY"), or nullptr.
  KeyState* authenticate(std::string_view authorization_header) const;
  KeyState* find_by_hash(const std::string& sha256_hex) const;

 private:
  std::vector<std::unique_ptr<KeyState>> keys_;
};

// "Bearer KEY" -> KEY (case-insensitive scheme, surrounding spaces ignored); nullopt otherwise.
std::optional<std::string_view> bearer_token(std::string_view header);

}  // namespace ts::server
