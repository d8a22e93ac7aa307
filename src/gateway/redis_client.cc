#include "gateway/redis_client.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <cerrno>
#include <chrono>

namespace ts::gateway {

namespace {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

timeval to_timeval(int64_t ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

std::string io_kind(const redisContext* c) {
  if (c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ETIMEDOUT)) return "timeout";
  return "connect";
}


void convert(const redisReply* r, RedisClient::Reply* out) {
  using T = RedisClient::Reply::Type;
  switch (r->type) {
    case REDIS_REPLY_INTEGER: out->type = T::kInteger; out->integer = int64_t(r->integer); break;
    case REDIS_REPLY_STRING: out->type = T::kString; out->str.assign(r->str, r->len); break;
    case REDIS_REPLY_STATUS: out->type = T::kStatus; out->str.assign(r->str, r->len); break;
    case REDIS_REPLY_ARRAY:
      out->type = T::kArray;
      out->elements.resize(r->elements);
      for (size_t i = 0; i < r->elements; ++i) convert(r->element[i], &out->elements[i]);
      break;
    default: out->type = T::kNil;
  }
}

}  // namespace

RedisClient::RedisClient(std::string host, int32_t port, int64_t timeout_ms, int64_t backoff_ms)
    : host_(std::move(host)), port_(port), timeout_ms_(timeout_ms), backoff_ms_(backoff_ms) {}

RedisClient::~RedisClient() {
  for (redisContext* c : idle_) redisFree(c);
}

redisContext* RedisClient::take(std::string* kind, std::string* error) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!idle_.empty()) {
      redisContext* c = idle_.back();
      idle_.pop_back();
      return c;
    }
    if (steady_ms() < down_until_ms_) {
      *kind = "connect";
      *error = "Redis at " + host_ + ":" + std::to_string(port_) + " was unreachable moments ago";
      return nullptr;
    }
  }
  redisContext* c = redisConnectWithTimeout(host_.c_str(), port_, to_timeval(timeout_ms_));
  if (!c || c->err) {
    *kind = c ? io_kind(c) : "connect";
    *error = "cannot connect to Redis at " + host_ + ":" + std::to_string(port_) + ": " + (c ? c->errstr : "out of memory");
    if (c) redisFree(c);
    std::lock_guard<std::mutex> lk(mu_);
    down_until_ms_ = steady_ms() + backoff_ms_;
    return nullptr;
  }
  redisSetTimeout(c, to_timeval(timeout_ms_));
  return c;
}

void RedisClient::give_back(redisContext* c) {
  std::lock_guard<std::mutex> lk(mu_);
  if (idle_.size() < 64) idle_.push_back(c);
  else redisFree(c);
}

bool RedisClient::command(const std::vector<std::string>& argv, Reply* out, std::string* kind, std::string* error) {
  redisContext* c = take(kind, error);
  if (!c) return false;
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(ptrs.size()), ptrs.data(), lens.data()));
  if (!r) {  // the connection failed or timed out: it is not reusable
    *kind = io_kind(c);
    *error = std::string("Redis: ") + (c->errstr[0] ? c->errstr : "no reply");
    redisFree(c);
    return false;
  }
  bool ok = true;
  if (r->type == REDIS_REPLY_ERROR) {  // a script error, a key of the wrong type: the connection is fine
    *kind = "reply";
    *error = std::string("Redis answered an error: ") + std::string(r->str, r->len);
    ok = false;
  } else {
    *out = Reply{};
    convert(r, out);
  }
  freeReplyObject(r);
  give_back(c);
  return ok;
}

}  // namespace ts::gateway
