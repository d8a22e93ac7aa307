#include "server/auth.h"

#include <climits>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "server/sha256.h"

namespace ts::server {
namespace {

// As Retry-After says it: whole seconds, rounded up, at least 1.
int64_t whole_seconds(int64_t ms) { return ms <= 0 ? 1 : (ms + 999) / 1000; }

}  // namespace

TokenBucket::TokenBucket(int64_t per_min, int64_t now_ns) : capacity_(per_min), level_(double(per_min)), last_ns_(now_ns) {}

void TokenBucket::refill(int64_t now_ns) {
  if (now_ns <= last_ns_) return;
  const double rate_per_ns = double(capacity_) / 60e9;
  level_ = std::min(double(capacity_), level_ + double(now_ns - last_ns_) * rate_per_ns);
  last_ns_ = now_ns;
}

bool TokenBucket::try_take(double n, int64_t now_ns) {
  if (unlimited()) return true;
  refill(now_ns);
  if (level_ + 1e-9 < n) return false;
  level_ -= n;
  return true;
}

void TokenBucket::give_back(double n, int64_t now_ns) {
  if (unlimited()) return;
  refill(now_ns);
  level_ = std::min(double(capacity_), level_ + n);
}

double TokenBucket::available(int64_t now_ns) {
  if (unlimited()) return 0;
  refill(now_ns);
  return level_;
}

int64_t TokenBucket::wait_ms(double n, int64_t now_ns) {
  if (unlimited()) return 0;
  if (n > double(capacity_)) return -1;
  refill(now_ns);
  if (level_ >= n) return 0;
  const double ms = (n - level_) * 60000.0 / double(capacity_);
  return int64_t(std::ceil(ms));
}

int64_t TokenBucket::reset_ms(int64_t now_ns) { return unlimited() ? 0 : wait_ms(double(capacity_), now_ns); }

KeyState::KeyState(KeyConfig cfg, const Clock& clock)
    : cfg_(std::move(cfg)),
      clock_(clock),
      requests_(cfg_.requests_per_min, clock.now_ns()),
      tokens_(cfg_.tokens_per_min, clock.now_ns()) {}

bool KeyState::allows_tier(const std::string& tier) const {
  return cfg_.tiers.empty() || std::find(cfg_.tiers.begin(), cfg_.tiers.end(), tier) != cfg_.tiers.end();
}

sched::Move KeyState::entitlement(sched::TierId requested, const std::vector<std::string>& tiers, bool reject) const {
  auto rank = [&](const std::string& name) {
    const auto it = std::find(tiers.begin(), tiers.end(), name);
    return it == tiers.end() ? sched::TierId(-1) : sched::TierId(it - tiers.begin());
  };
  std::vector<sched::TierId> allowed;
  for (const std::string& t : cfg_.tiers)
    if (const sched::TierId r = rank(t); r >= 0) allowed.push_back(r);
  return sched::entitlement_move(requested, allowed, cfg_.default_tier.empty() ? -1 : rank(cfg_.default_tier), reject);
}

RateLimitInfo KeyState::info_locked(int64_t now) {
  RateLimitInfo i;
  i.limit_requests = cfg_.requests_per_min;
  i.remaining_requests = int64_t(std::floor(requests_.available(now)));
  i.reset_requests_ms = requests_.reset_ms(now);
  i.limit_tokens = cfg_.tokens_per_min;
  i.remaining_tokens = int64_t(std::floor(tokens_.available(now)));
  i.reset_tokens_ms = tokens_.reset_ms(now);
  return i;
}

Admission KeyState::admit(int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_.now_ns();
  Admission a;
  if (cfg_.max_concurrent > 0 && in_flight_ >= cfg_.max_concurrent) {
    a.verdict = LimitVerdict::kConcurrent;
    a.retry_after_ms = 1000;
    a.message = "this key already has " + std::to_string(in_flight_) + " requests in flight (limit " +
                std::to_string(cfg_.max_concurrent) + ")";
  } else if (!requests_.unlimited() && requests_.wait_ms(1, now) != 0) {
    a.verdict = LimitVerdict::kRequests;
    a.retry_after_ms = requests_.wait_ms(1, now);
    a.message = "rate limit reached: " + std::to_string(cfg_.requests_per_min) + " requests per minute; try again in " +
                std::to_string(whole_seconds(a.retry_after_ms)) + "s";
  } else if (!tokens_.unlimited() && tokens_.wait_ms(double(tokens), now) != 0) {
    a.verdict = LimitVerdict::kTokens;
    const int64_t w = tokens_.wait_ms(double(tokens), now);
    if (w < 0) {
      a.retry_after_ms = 60000;
      a.message = "the request needs " + std::to_string(tokens) + " tokens (prompt + max_tokens), more than the key's " +
                  std::to_string(cfg_.tokens_per_min) + " tokens per minute; lower max_tokens";
    } else {
      a.retry_after_ms = w;
      a.message = "rate limit reached: " + std::to_string(cfg_.tokens_per_min) + " tokens per minute (available " +
                  std::to_string(int64_t(std::floor(tokens_.available(now)))) + ", requested " + std::to_string(tokens) +
                  " = prompt + max_tokens); try again in " + std::to_string(whole_seconds(w)) + "s";
    }
  } else {
    requests_.try_take(1, now);
    tokens_.try_take(double(tokens), now);
    ++in_flight_;
  }
  a.info = info_locked(now);
  return a;
}

void KeyState::release(int64_t unused_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_ > 0) --in_flight_;
  if (unused_tokens > 0) tokens_.give_back(double(unused_tokens), clock_.now_ns());
}

int32_t KeyState::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

KeyTable::KeyTable(const std::vector<KeyConfig>& keys, const Clock& clock) {
  for (const auto& k : keys) keys_.push_back(std::make_unique<KeyState>(k, clock));
}

std::optional<std::string_view> bearer_token(std::string_view h) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  h = trim(h);
  constexpr std::string_view kScheme = "bearer";
  if (h.size() <= kScheme.size() + 1) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(h[i])) != kScheme[i]) return std::nullopt;
  if (h[kScheme.size()] != ' ' && h[kScheme.size()] != '\t') return std::nullopt;
  std::string_view key = trim(h.substr(kScheme.size() + 1));
  if (key.empty()) return std::nullopt;
  return key;
}

KeyState* KeyTable::find_by_hash(const std::string& hex) const {
  // Comparing all hashes fully (no early exit on the first match) keeps the time
  // independent of which key matched; the hashes are not secret, but it costs nothing.
  KeyState* found = nullptr;
  for (const auto& k : keys_) {
    unsigned diff = 0;
    const std::string& h = k->config().sha256;
    if (h.size() != hex.size()) continue;
    for (size_t i = 0; i < h.size(); ++i) diff |= unsigned(h[i] ^ hex[i]);
    if (diff == 0) found = k.get();
  }
  return found;
}

KeyState* KeyTable::authenticate(std::string_view header) const {
  const auto key = bearer_token(header);
  if (!key) return nullptr;
  return find_by_hash(sha256_hex(*key));
}

}  // namespace ts::server
