// Per-key limits shared by every gateway replica, kept in Redis (hiredis, Debian's
// libhiredis-dev): the requests/min and tokens/min buckets and the concurrency count of each
// key hold across the replicas, whichever one a request reaches.
//
// Atomic by construction: one Lua script per admission reads both buckets (refilled from
// Redis's own clock, TIME, so replicas' clocks play no part), checks the concurrency set,
// and charges all three or nothing; another refunds unused tokens and frees the slot. No
// read-modify-write crosses the network. Buckets are hashes {a: available, t: ms} under
// PREFIX + the key's sha256 + ":req" / ":tok", expiring two minutes after their last use;
// concurrency is a sorted set of leases (member: the request's id, score: its expiry), so a
// slot held by a replica that died frees after lease_ms.
//
// Failures (unreachable, over timeout_ms, an error reply, a key of the wrong type) come back
// as kUnavailable with the reason; the caller limits locally (fail open) or refuses with 503
// (fail closed). Connections and their backoff: gateway/redis_client.h.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gateway/config.h"
#include "gateway/redis_client.h"
#include "server/auth.h"

namespace ts::gateway {

class SharedLimits {
 public:
  explicit SharedLimits(RedisConfig cfg, int64_t backoff_ms = 500);

  enum class Outcome : uint8_t { kAdmitted, kLimited, kUnavailable };
  struct Admission {
    Outcome outcome = Outcome::kUnavailable;
    server::LimitVerdict verdict = server::LimitVerdict::kOk;  // kLimited: which limit
    int64_t retry_after_ms = 0;
    std::string message;  // kLimited: for the client; kUnavailable: what failed (for logs and metrics)
    std::string error_kind;  // kUnavailable: connect, timeout, reply, script
  };

  // Charges one request, `tokens` and (with max_concurrent) a slot under `lease_id` (unique
  // per request), or nothing.
  Admission admit(const server::KeyConfig& key, int64_t tokens, const std::string& lease_id);
  // The request ended: refunds `unused_tokens` and frees its slot. Best effort (a failure is
  // counted by the caller; the lease expires by itself).
  bool release(const server::KeyConfig& key, int64_t unused_tokens, const std::string& lease_id, std::string* error);

  const RedisConfig& config() const { return cfg_; }

 private:
  // Runs EVAL script with the keys and args; false and *kind/*error on any failure.
  bool eval(const char* script, const std::vector<std::string>& keys, const std::vector<std::string>& args,
            std::vector<int64_t>* out, std::string* kind, std::string* error);

  RedisConfig cfg_;
  RedisClient redis_;
};

}  // namespace ts::gateway
