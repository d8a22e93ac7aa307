#include "gateway/cache.h"

#include <nlohmann/json.hpp>

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

RedisCache::RedisCache(const RedisConfig& redis, int64_t ttl_ms, int64_t max_entry_bytes)
    : client_(redis.host, redis.port, redis.timeout_ms), prefix_(redis.prefix + "cache:"), ttl_ms_(ttl_ms),
      max_entry_bytes_(max_entry_bytes) {}

std::optional<CachedAnswer> RedisCache::get(const std::string& key) {
  RedisClient::Reply r;
  std::string kind, error;
  const bool ok = client_.command({"GET", prefix_ + key}, &r, &kind, &error);
  std::lock_guard<std::mutex> lk(mu_);
  if (!ok) {
    ++stats_.errors;
    ++stats_.misses;
    return std::nullopt;
  }
  if (r.type != RedisClient::Reply::Type::kString) {
    ++stats_.misses;
    return std::nullopt;
  }
  const nlohmann::json j = nlohmann::json::parse(r.str, nullptr, false);
  const bool valid = j.is_object() && j.value("v", 0) == 1 && j.contains("text") && j["text"].is_string() &&
                     j.contains("finish") && j["finish"].is_string() && j.contains("p") && j["p"].is_number_integer() &&
                     j.contains("c") && j["c"].is_number_integer();
  if (!valid) {
    ++stats_.corrupt;
    ++stats_.misses;
    RedisClient::Reply ignored;
    client_.command({"DEL", prefix_ + key}, &ignored, &kind, &error);
    return std::nullopt;
  }
  ++stats_.hits;
  return CachedAnswer{j["text"].get<std::string>(), j["finish"].get<std::string>(), j["p"].get<int64_t>(), j["c"].get<int64_t>()};
}

void RedisCache::put(const std::string& key, CachedAnswer a) {
  const std::string v = nlohmann::json{{"v", 1}, {"text", a.text}, {"finish", a.finish_reason}, {"p", a.prompt_tokens},
                                       {"c", a.completion_tokens}}
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (int64_t(v.size()) > max_entry_bytes_) return;
  RedisClient::Reply r;
  std::string kind, error;
  if (!client_.command({"SET", prefix_ + key, v, "PX", std::to_string(ttl_ms_)}, &r, &kind, &error)) {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.errors;
  }
}

CacheStore::Stats RedisCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace ts::gateway
