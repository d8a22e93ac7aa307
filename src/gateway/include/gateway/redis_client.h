// A small Redis client for the gateway's shared state (the limits and the response cache):
// pooled hiredis connections, one command at a time each, with a timeout on connect and on
// every command. After a failed connect nothing is tried for backoff_ms, so requests do not
// each wait out the connect timeout while Redis is down; then it is tried again by itself.
// Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

struct redisContext;

namespace ts::gateway {

class RedisClient {
 public:
  RedisClient(std::string host, int32_t port, int64_t timeout_ms, int64_t backoff_ms = 500);
  ~RedisClient();

  struct Reply {
    enum class Type : uint8_t { kNil, kInteger, kString, kStatus, kArray } type = Type::kNil;
    int64_t integer = 0;
    std::string str;
    std::vector<Reply> elements;
  };
  // Sends argv; false on any failure with *kind (connect, timeout, reply: an error reply)
  // and *error (a dropped or timed-out connection is closed, not reused).
  bool command(const std::vector<std::string>& argv, Reply* out, std::string* kind, std::string* error);

 private:
  redisContext* take(std::string* kind, std::string* error);
  void give_back(redisContext* c);

  std::string host_;
  int32_t port_;
  int64_t timeout_ms_, backoff_ms_;
  std::mutex mu_;
  std::vector<redisContext*> idle_;  // GUARDED_BY(mu_)
  int64_t down_until_ms_ = 0;        // GUARDED_BY(mu_): steady clock
};

}  // namespace ts::gateway
