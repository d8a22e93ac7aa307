// The gateway's response cache: answers to deterministic requests (temperature 0 or a
// fixed seed) kept for a while, so that a frequent repeated question costs no worker time.
// In-process: an LRU bounded in bytes, each entry with a time to live. Thread-safe.
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

namespace ts::gateway {

struct CachedAnswer {
  std::string text;
  std::string finish_reason;  // "stop" or "length": nothing else is cached
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

class ResponseCache {
 public:
  ResponseCache(int64_t max_bytes, int64_t ttl_ms, const Clock& clock);

  std::optional<CachedAnswer> get(const std::string& key);
  void put(const std::string& key, CachedAnswer a);

  struct Stats {
    int64_t hits = 0, misses = 0, entries = 0, bytes = 0, evictions = 0, expired = 0;
  };
  Stats stats() const;

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
  Stats stats_;          // GUARDED_BY(mu_)
};

}  // namespace ts::gateway
