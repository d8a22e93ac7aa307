#include "gateway/shared_limits.h"

namespace ts::gateway {

namespace {

// KEYS: requests bucket, tokens bucket, concurrency set.
// ARGV: requests/min, tokens/min, max concurrent (0: none), tokens to charge, lease ms,
// lease id. Returns {verdict, retry_after_ms}: 0 admitted, 1 requests, 2 tokens, 3
// concurrency, 4 the request alone exceeds tokens/min.
constexpr const char* kAdmitScript = R"LUA(
local rpm, tpm, conc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cost, lease = tonumber(ARGV[4]), tonumber(ARGV[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function avail(key, cap)
  local v = redis.call('HMGET', key, 'a', 't')
  local a, ts = tonumber(v[1]), tonumber(v[2])
  if a == nil or ts == nil then return cap end
  return math.min(cap, a + math.max(0, now - ts) * cap / 60000)
end
local ra, ta = 0, 0
if rpm > 0 then
  ra = avail(KEYS[1], rpm)
  if ra < 1 then return {1, math.ceil((1 - ra) * 60000 / rpm)} end
end
if tpm > 0 then
  if cost > tpm then return {4, 0} end
  ta = avail(KEYS[2], tpm)
  if ta < cost then return {2, math.ceil((cost - ta) * 60000 / tpm)} end
end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then return {3, 1000} end
  redis.call('ZADD', KEYS[3], now + lease, ARGV[6])
  redis.call('PEXPIRE', KEYS[3], lease)
end
if rpm > 0 then
  redis.call('HSET', KEYS[1], 'a', tostring(ra - 1), 't', tostring(now))
  redis.call('PEXPIRE', KEYS[1], 120000)
end
if tpm > 0 then
  redis.call('HSET', KEYS[2], 'a', tostring(ta - cost), 't', tostring(now))
  redis.call('PEXPIRE', KEYS[2], 120000)
end
return {0, 0}
)LUA";

// KEYS: tokens bucket, concurrency set. ARGV: tokens/min, tokens to refund, lease id.
constexpr const char* kReleaseScript = R"LUA(
local tpm, refund = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm > 0 and refund > 0 then
  local v = redis.call('HGET', KEYS[1], 'a')
  if v then redis.call('HSET', KEYS[1], 'a', tostring(math.min(tpm, tonumber(v) + refund))) end
end
redis.call('ZREM', KEYS[2], ARGV[3])
return {0, 0}
)LUA";

}  // namespace

SharedLimits::SharedLimits(RedisConfig cfg, int64_t backoff_ms)
    : cfg_(std::move(cfg)), redis_(cfg_.host, cfg_.port, cfg_.timeout_ms, backoff_ms) {}

bool SharedLimits::eval(const char* script, const std::vector<std::string>& keys, const std::vector<std::string>& args,
                        std::vector<int64_t>* out, std::string* kind, std::string* error) {
  std::vector<std::string> argv = {"EVAL", script, std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  RedisClient::Reply r;
  if (!redis_.command(argv, &r, kind, error)) return false;
  out->clear();
  bool ok = r.type == RedisClient::Reply::Type::kArray;
  for (const auto& e : r.elements) {
    ok = ok && e.type == RedisClient::Reply::Type::kInteger;
    out->push_back(e.integer);
  }
  if (!ok) {
    *kind = "reply";
    *error = "Redis: the limits script answered something else than integers";
  }
  return ok;
}

SharedLimits::Admission SharedLimits::admit(const server::KeyConfig& key, int64_t tokens, const std::string& lease_id) {
  Admission a;
  if (key.requests_per_min <= 0 && key.tokens_per_min <= 0 && key.max_concurrent <= 0) {
    a.outcome = Outcome::kAdmitted;
    return a;
  }
  const std::string base = cfg_.prefix + key.sha256;
  std::vector<int64_t> v;
  if (!eval(kAdmitScript, {base + ":req", base + ":tok", base + ":conc"},
            {std::to_string(key.requests_per_min), std::to_string(key.tokens_per_min), std::to_string(key.max_concurrent),
             std::to_string(tokens), std::to_string(cfg_.lease_ms), lease_id},
            &v, &a.error_kind, &a.message)) {
    a.outcome = Outcome::kUnavailable;
    return a;
  }
  if (v.size() != 2) {
    a.outcome = Outcome::kUnavailable;
    a.error_kind = "reply";
    a.message = "Redis: the limits script answered " + std::to_string(v.size()) + " values";
    return a;
  }
  a.retry_after_ms = v[1];
  switch (v[0]) {
    case 0: a.outcome = Outcome::kAdmitted; break;
    case 1:
      a.outcome = Outcome::kLimited;
      a.verdict = server::LimitVerdict::kRequests;
      a.message = "key '" + key.name + "': " + std::to_string(key.requests_per_min) + " requests per minute (all gateways)";
      break;
    case 2:
    case 4:
      a.outcome = Outcome::kLimited;
      a.verdict = server::LimitVerdict::kTokens;
      a.message = v[0] == 4 ? "key '" + key.name + "': this request's " + std::to_string(tokens) + " tokens exceed its " +
                                  std::to_string(key.tokens_per_min) + " tokens per minute"
                            : "key '" + key.name + "': " + std::to_string(key.tokens_per_min) + " tokens per minute (all gateways)";
      break;
    case 3:
      a.outcome = Outcome::kLimited;
      a.verdict = server::LimitVerdict::kConcurrent;
      a.message = "key '" + key.name + "': " + std::to_string(key.max_concurrent) + " requests at once (all gateways)";
      break;
    default:
      a.outcome = Outcome::kUnavailable;
      a.error_kind = "reply";
      a.message = "Redis: the limits script answered verdict " + std::to_string(v[0]);
  }
  return a;
}

bool SharedLimits::release(const server::KeyConfig& key, int64_t unused_tokens, const std::string& lease_id, std::string* error) {
  if (key.tokens_per_min <= 0 && key.max_concurrent <= 0) return true;
  const std::string base = cfg_.prefix + key.sha256;
  std::vector<int64_t> v;
  std::string kind;
  return eval(kReleaseScript, {base + ":tok", base + ":conc"},
              {std::to_string(key.tokens_per_min), std::to_string(std::max<int64_t>(0, unused_tokens)), lease_id}, &v, &kind,
              error);
}

}  // namespace ts::gateway
