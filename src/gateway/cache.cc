#include "gateway/cache.h"

namespace ts::gateway {

ResponseCache::ResponseCache(int64_t max_bytes, int64_t ttl_ms, const Clock& clock)
    : max_bytes_(max_bytes), ttl_ns_(ttl_ms * 1000000), clock_(clock) {}

void ResponseCache::drop(std::list<Slot>::iterator it) {
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(it->key);
  lru_.erase(it);
}

std::optional<CachedAnswer> ResponseCache::get(const std::string& key) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  if (clock_.now_ns() >= it->second->expires_ns) {
    drop(it->second);
    ++stats_.expired;
    ++stats_.misses;
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  ++stats_.hits;
  return it->second->a;
}

void ResponseCache::put(const std::string& key, CachedAnswer a) {
  const int64_t bytes = int64_t(key.size() + a.text.size() + a.finish_reason.size() + sizeof(Slot));
  std::lock_guard<std::mutex> lk(mu_);
  if (const auto it = index_.find(key); it != index_.end()) drop(it->second);
  if (bytes > max_bytes_) return;  // larger than the whole cache
  while (stats_.bytes + bytes > max_bytes_ && !lru_.empty()) {
    drop(std::prev(lru_.end()));
    ++stats_.evictions;
  }
  lru_.push_front(Slot{key, std::move(a), clock_.now_ns() + ttl_ns_, bytes});
  index_[key] = lru_.begin();
  stats_.bytes += bytes;
  ++stats_.entries;
}

ResponseCache::Stats ResponseCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace ts::gateway
