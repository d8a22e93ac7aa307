// The gateway's response cache: answers to deterministic requests (temperature 0 or a
// fixed seed) kept for a while, so that a frequent repeated question costs no worker time.
// In-process: an LRU bounded in bytes, each entry with a time to live; or in Redis, shared
// by every replica. Thread-safe.
//
// What an entry holds is the answer, not the bytes of one response: the text, why it
// finished and the token counts, so that a hit can be answered like a miss in either form
// (a JSON body, or SSE chunks when the request streams), under a fresh id.
#pragma once

#include <cstdint>
#include <iterator>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/clock.h"
#include "gateway/config.h"
#include "gateway/redis_client.h"

namespace ts::gateway {

struct CachedAnswer {
  std::string text;
  std::string finish_reason;  // "stop" or "length": nothing else is cached
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// Where answers are kept: in this process (ResponseCache) or in Redis (RedisCache, shared
// by the replicas).
class CacheStore {
 public:
  virtual ~CacheStore() = default;
  virtual std::optional<CachedAnswer> get(const std::string& key) = 0;
  virtual void put(const std::string& key, CachedAnswer a) = 0;
  struct Stats {
    int64_t hits = 0, misses = 0, entries = -1, bytes = -1, evictions = 0, expired = 0;  // -1: not known here
    int64_t errors = 0;   // Redis calls that failed (a miss, nothing stored)
    int64_t corrupt = 0;  // entries that did not parse (dropped, a miss)
  };
  virtual Stats stats() const = 0;
};

class ResponseCache : public CacheStore {
 public:
  ResponseCache(int64_t max_bytes, int64_t ttl_ms, const Clock& clock);

  std::optional<CachedAnswer> get(const std::string& key) override;
  void put(const std::string& key, CachedAnswer a) override;
  Stats stats() const override;

 private:
  struct Slot {
    std::string key;
    CachedAnswer a;
    int64_t expires_ns;
    int64_t bytes;
  };
  void drop(std::list<Slot>::iterator it);

  const int64_t max_bytes_, ttl_ns_;
  const Clock& clock_;
  mutable std::mutex mu_;
  std::list<Slot> lru_;  // GUARDED_BY(mu_): most recent first
  std::unordered_map<std::string, std::list<Slot>::iterator> index_;  // GUARDED_BY(mu_)
  Stats stats_{0, 0, 0, 0, 0, 0, 0, 0};  // GUARDED_BY(mu_)
};

// In Redis: one string per answer under PREFIX "cache:" KEY, JSON, with the time to live as
// its expiry; the bytes are bounded by that Redis's maxmemory policy (an answer over
// max_entry_bytes is not stored). A failed call is a miss (and stores nothing); an entry
// that does not parse is dropped and counted, never served.
class RedisCache : public CacheStore {
 public:
  RedisCache(const RedisConfig& redis, int64_t ttl_ms, int64_t max_entry_bytes);
  std::optional<CachedAnswer> get(const std::string& key) override;
  void put(const std::string& key, CachedAnswer a) override;
  Stats stats() const override;

 private:
  RedisClient client_;
  std::string prefix_;
  int64_t ttl_ms_, max_entry_bytes_;
  mutable std::mutex mu_;
  Stats stats_;  // GUARDED_BY(mu_)
};

}  // namespace ts::gateway
