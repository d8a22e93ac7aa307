// The gateway's state shared by replicas, with real processes on loopback: a real
// redis-server (started here, on a free port), tierserve workers and gateway replicas —
// per-key limits exact across replicas, Redis gone, slow or holding a key of the wrong
// type (explicit, counted, recovering by itself), a replica whose clock is wrong; the
// response cache, in memory and in Redis shared by replicas, a corrupt entry never served.
#define TS_GATEWAY_TEST_DIR "gateway_shared_test"
#include "testing/gateway.h"

#include <ctime>

namespace ts {
namespace {

// Redis (Debian's redis-server, started here on a free loopback port, no persistence).
// Required where TIERSERVE_REQUIRE_REDIS=1 (CI).
std::string redis_server_bin() {
  if (const char* e = std::getenv("TIERSERVE_REDIS_SERVER"); e && *e) return e;
  return "/usr/bin/redis-server";
}

struct Redis {
  int port = 0;
  pid_t pid = -1;
  bool start(const std::string& name) { return start_on(free_port(), name); }
  bool start_on(int p, const std::string& name) {
    port = p;
    pid = testing_proc::spawn({redis_server_bin(), "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no"},
                              kWork + "/" + name + ".out", kWork + "/" + name + ".err");
    for (int i = 0; i < 200; ++i) {
      const int fd = connect_to(port);
      if (fd >= 0) {
        ::close(fd);
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  void stop() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int st;
    ::waitpid(pid, &st, 0);
    pid = -1;
  }
  ~Redis() { stop(); }
};

bool have_redis() {
  if (::access(redis_server_bin().c_str(), X_OK) == 0) return true;
  const char* req = std::getenv("TIERSERVE_REQUIRE_REDIS");
  if (req && std::string(req) == "1") ADD_FAILURE() << "redis-server is not installed (scripts/deps.sh installs it)";
  return false;
}

// Two gateway replicas share a key's limits through one Redis: of 2N requests spread over
// both, exactly N (its requests per minute) are admitted; a concurrency slot taken on one
// replica is seen by the other and freed when the request ends. Redis gone: the fail-closed
// replica refuses with 503 limits_unavailable, the fail-open one limits locally and says so;
// both recover by themselves when Redis is back, and a key of the wrong type in Redis is an
// explicit, counted error.
TEST(Gateway, TwoReplicasShareAKeysLimitsInRedis) {
  prepare();
  if (!have_redis()) GTEST_SKIP() << "no redis-server";
  Redis redis;
  ASSERT_TRUE(redis.start("redis")) << testing_proc::slurp(kWork + "/redis.err");
  ServerProcess worker(kWork, "shared-worker");
  ASSERT_TRUE(worker.start_command(TS_TIERSERVE_BIN, "serve", "model: {path: '" + kSlow + "', threads: 1, served_name: slow}\n", {})) << worker.stderr_text();
  const std::string keys = "keys:\n  - {name: n, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-n", kWork) + ", requests_per_min: 6}\n"
                           "  - {name: c, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-c", kWork) + ", max_concurrent: 1}\n"
                           "  - {name: w, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-w", kWork) + ", requests_per_min: 1000}\n";
  auto cfg = [&](const char* on_error) {
    return "workers:\n  - {name: w, kind: tierserve, model: slow, url: 'http://127.0.0.1:" + std::to_string(worker.port()) +
           "'}\n" + kHealth + keys + "redis: {host: 127.0.0.1, port: " + std::to_string(redis.port) + ", timeout_ms: 200, on_error: " +
           on_error + "}\n";
  };
  ServerProcess a(kWork, "replica-a"), b(kWork, "replica-b");
  ASSERT_TRUE(a.start_command(TS_TIERSERVE_BIN, "gateway", cfg("closed"), {"--work-dir", kWork + "/replica-a.d"})) << a.stderr_text();
  ASSERT_TRUE(b.start_command(TS_TIERSERVE_BIN, "gateway", cfg("open"), {"--work-dir", kWork + "/replica-b.d"})) << b.stderr_text();
  const HeaderList kn = {{"Authorization", "Bearer sk-n"}}, kc = {{"Authorization", "Bearer sk-c"}}, kw = {{"Authorization", "Bearer sk-w"}};
  ASSERT_TRUE(wait_up(a.port(), {}, 60000, kn)) << a.stderr_text();
  ASSERT_TRUE(wait_up(b.port(), {}, 60000, kn)) << b.stderr_text();
  // 2N requests, alternating replicas: exactly N admitted.
  int ok = 0, limited = 0;
  for (int i = 0; i < 12; ++i) {
    const HttpResult r = http(i % 2 ? b.port() : a.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false), kn);
    if (r.status == 200) ++ok;
    else if (r.status == 429 && body_json(r)["error"]["code"] == "rate_limit_exceeded") ++limited;
    else ADD_FAILURE() << r.status << " " << r.body;
  }
  EXPECT_EQ(ok, 6);
  EXPECT_EQ(limited, 6);
  // A concurrency slot held through replica A is seen by replica B, and freed at the end.
  {
    OpenRequest hold(a.port(), "POST", "/v1/completions", completion("slow", "Once upon a time", 2000, true, "", true), kc);
    ASSERT_TRUE(hold.read_until("data: ")) << hold.raw();
    const HttpResult r = http(b.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false), kc);
    EXPECT_EQ(r.status, 429) << r.body;
    EXPECT_EQ(body_json(r)["error"]["code"], "concurrency_limit_exceeded") << r.body;
    hold.close();
  }
  bool freed = false;
  for (int i = 0; i < 100 && !freed; ++i) {
    freed = http(b.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false), kc).status == 200;
    if (!freed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(freed) << "the slot was not freed when the stream ended";
  // Redis gone: explicit on both, and counted.
  redis.stop();
  HttpResult r = http(a.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false), kw);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(body_json(r)["error"]["code"], "limits_unavailable") << r.body;
  EXPECT_FALSE(r.header("retry-after").empty());
  r = http(b.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false), kw);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-limits"), "local");
  std::string m = http(a.port(), "GET", "/metrics", "", kw).body;
  EXPECT_GE(metric_sum(m, "tierserve_gateway_shared_limits_errors_total{kind=\"connect\"}"), 1) << m;
  EXPECT_EQ(metric_sum(m, "tierserve_gateway_shared_limits_total{outcome=\"unavailable_refused\"}"), 1) << m;
  // Back on the same port: both recover by themselves (within the reconnect backoff).
  ASSERT_TRUE(redis.start_on(redis.port, "redis2")) << testing_proc::slurp(kWork + "/redis2.err");
  bool back = false;
  for (int i = 0; i < 100 && !back; ++i) {
    r = http(a.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false), kw);
    back = r.status == 200;
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(back) << r.status << " " << r.body;
  back = false;  // the fail-open replica: shared again once its own reconnect backoff is over
  for (int i = 0; i < 100 && !back; ++i) {
    r = http(b.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false), kw);
    EXPECT_EQ(r.status, 200) << r.body;
    back = r.header("x-tierserve-limits").empty();
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(back) << "the fail-open replica still limits locally";
  // A key of the wrong type where a bucket should be: an explicit, counted error.
  const std::string wkey = "tierserve:" + hash_key(TS_TIERSERVE_BIN, "sk-w", kWork) + ":req";
  ASSERT_EQ(std::system(("redis-cli -p " + std::to_string(redis.port) + " SET '" + wkey + "' oops > /dev/null").c_str()), 0);
  r = http(a.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false), kw);
  EXPECT_EQ(r.status, 503) << r.body;
  m = http(a.port(), "GET", "/metrics", "", kw).body;
  EXPECT_GE(metric_sum(m, "tierserve_gateway_shared_limits_errors_total{kind=\"reply\"}"), 1) << m;
  EXPECT_EQ(a.stop(SIGTERM), 0) << a.stderr_text();
  EXPECT_EQ(b.stop(SIGTERM), 0) << b.stderr_text();
}

// Redis slow (every client paused past the replicas' timeout): each request is answered
// at its timeout, explicitly (503 limits_unavailable fail-closed, local limits fail-open),
// counted as a timeout, and both recover by themselves, the stale replies of the timed-out
// connections never read as answers (a fresh key's limit is still exact afterwards). A
// replica whose wall clock is ten minutes ahead (an LD_PRELOAD shim) shares the limits exactly:
// the buckets run on Redis's clock, not the replicas'.
TEST(Gateway, SlowRedisAndASkewedReplicaClock) {
  prepare();
  if (!have_redis()) GTEST_SKIP() << "no redis-server";
  Redis redis;
  ASSERT_TRUE(redis.start("redis-slow")) << testing_proc::slurp(kWork + "/redis-slow.err");
  ServerProcess worker(kWork, "slow-redis-worker");
  ASSERT_TRUE(worker.start_command(TS_TIERSERVE_BIN, "serve", "model: {path: '" + kStories + "', threads: 1, served_name: stories}\n", {}))
      << worker.stderr_text();
  const std::string keys = "keys:\n  - {name: n, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-skew", kWork) + ", requests_per_min: 6}\n"
                           "  - {name: m, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-after", kWork) + ", requests_per_min: 4}\n"
                           "  - {name: w, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-wide", kWork) + ", requests_per_min: 1000}\n";
  auto cfg = [&](const char* on_error) {
    return "workers:\n  - {name: w, kind: tierserve, model: stories, url: 'http://127.0.0.1:" + std::to_string(worker.port()) +
           "'}\n" + kHealth + keys + "redis: {host: 127.0.0.1, port: " + std::to_string(redis.port) + ", timeout_ms: 200, on_error: " +
           on_error + "}\n";
  };
  ServerProcess a(kWork, "slow-a"), b(kWork, "skewed-b");
  ASSERT_TRUE(a.start_command(TS_TIERSERVE_BIN, "gateway", cfg("closed"), {"--work-dir", kWork + "/slow-a.d"})) << a.stderr_text();
  // B's wall clock ten minutes ahead, its monotonic clock left alone (tests/skewed_clock.cc).
  ::setenv("LD_PRELOAD", TS_SKEWED_CLOCK_LIB, 1);
  ::setenv("TIERSERVE_TEST_CLOCK_SKEW_S", "600", 1);
  const bool b_up = b.start_command(TS_TIERSERVE_BIN, "gateway", cfg("open"), {"--work-dir", kWork + "/skewed-b.d"});
  ::unsetenv("LD_PRELOAD");
  ::unsetenv("TIERSERVE_TEST_CLOCK_SKEW_S");
  ASSERT_TRUE(b_up) << b.stderr_text();
  const HeaderList kn = {{"Authorization", "Bearer sk-skew"}}, km = {{"Authorization", "Bearer sk-after"}},
                   kw = {{"Authorization", "Bearer sk-wide"}};
  ASSERT_TRUE(wait_up(a.port(), {}, 60000, kw)) << a.stderr_text();
  ASSERT_TRUE(wait_up(b.port(), {}, 60000, kw)) << b.stderr_text();
  // The skew took: B's log lines are dated ten minutes ahead.
  {
    const std::string log = b.stderr_text();
    std::tm tm{};
    ASSERT_NE(strptime(log.c_str(), "%Y-%m-%dT%H:%M:%S", &tm), nullptr) << log;
    const int64_t now_s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    EXPECT_GT(int64_t(timegm(&tm)) - now_s, 500) << log.substr(0, 200);
  }
  HttpResult r;
  int ok = 0, limited = 0;
  for (int i = 0; i < 12; ++i) {
    r = http(i % 2 ? b.port() : a.port(), "POST", "/v1/completions", completion("stories", "Once", 2, false), kn);
    if (r.status == 200) ++ok;
    else if (r.status == 429 && body_json(r)["error"]["code"] == "rate_limit_exceeded") ++limited;
    else ADD_FAILURE() << r.status << " " << r.body;
  }
  EXPECT_EQ(ok, 6);
  EXPECT_EQ(limited, 6);
  // Redis paused for 3 s: answered at the 200 ms timeout, long before Redis answers.
  const std::string cli = "redis-cli -p " + std::to_string(redis.port);
  ASSERT_EQ(std::system((cli + " CLIENT PAUSE 3000 ALL > /dev/null").c_str()), 0);
  const auto t0 = std::chrono::steady_clock::now();
  r = http(a.port(), "POST", "/v1/completions", completion("stories", "Once", 2, false), kw);
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(body_json(r)["error"]["code"], "limits_unavailable") << r.body;
  EXPECT_LT(waited, 2500) << "the request waited for the paused Redis";
  r = http(b.port(), "POST", "/v1/completions", completion("stories", "Once", 2, false), kw);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-limits"), "local");
  const std::string m = http(a.port(), "GET", "/metrics", "", kw).body;
  EXPECT_GE(metric_sum(m, "tierserve_gateway_shared_limits_errors_total{kind=\"timeout\"}"), 1) << m;
  // Both shared again once Redis answers (the pause ends, then the reconnect backoff).
  for (int port : {a.port(), b.port()}) {
    bool back = false;
    for (int i = 0; i < 300 && !back; ++i) {
      r = http(port, "POST", "/v1/completions", completion("stories", "Once", 2, false), kw);
      back = r.status == 200 && r.header("x-tierserve-limits").empty();
      if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(back) << port << ": " << r.status << " " << r.body;
  }
  ok = limited = 0;
  for (int i = 0; i < 8; ++i) {
    r = http(i % 2 ? b.port() : a.port(), "POST", "/v1/completions", completion("stories", "Once", 2, false), km);
    if (r.status == 200) ++ok;
    else if (r.status == 429) ++limited;
    else ADD_FAILURE() << r.status << " " << r.body;
  }
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(limited, 4);
  EXPECT_EQ(a.stop(SIGTERM), 0) << a.stderr_text();
  EXPECT_EQ(b.stop(SIGTERM), 0) << b.stderr_text();
}

// The response cache: a deterministic request answered once by a worker and then from the
// cache, like a miss (the same text under a fresh id, as a body or as SSE chunks), costing
// no worker time, counted against the key's requests; scoped per key; never an error or a
// non-deterministic request.
TEST(Gateway, DeterministicRepeatsAreAnsweredFromTheCache) {
  prepare();
  ServerProcess g(kWork, "cache");
  const std::string cfg = "workers:\n" + local_worker("story", "stories", kStories, "shared") + kHealth +
                          "cache: {max_bytes: 1048576, ttl_ms: 60000}\n"
                          "keys:\n  - {name: k1, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-c1", kWork) + ", requests_per_min: 5}\n"
                          "  - {name: k2, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-c2", kWork) + "}\n";
  ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/cache.d"})) << g.stderr_text();
  const HeaderList k1 = {{"Authorization", "Bearer sk-c1"}}, k2 = {{"Authorization", "Bearer sk-c2"}};
  ASSERT_TRUE(wait_up(g.port(), {}, 60000, k2)) << g.stderr_text();
  auto placements = [&] { return metric_sum(http(g.port(), "GET", "/metrics", "", k2).body, "tierserve_gateway_placements_total{"); };
  const std::string req = completion("stories", "Once upon a time", 12, false);
  HttpResult miss = http(g.port(), "POST", "/v1/completions", req, k1);
  ASSERT_EQ(miss.status, 200) << miss.body;
  EXPECT_EQ(miss.header("x-tierserve-cache"), "miss");
  const double placed = placements();
  HttpResult hit = http(g.port(), "POST", "/v1/completions", req, k1);
  ASSERT_EQ(hit.status, 200) << hit.body;
  EXPECT_EQ(hit.header("x-tierserve-cache"), "hit");
  EXPECT_EQ(placements(), placed);  // no worker time
  const json a = body_json(miss), b = body_json(hit);
  EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]);
  EXPECT_EQ(b["choices"][0]["finish_reason"], a["choices"][0]["finish_reason"]);
  EXPECT_EQ(b["usage"], a["usage"]);
  EXPECT_EQ(b["model"], "stories");
  EXPECT_EQ(b["object"], "text_completion");
  EXPECT_NE(b["id"], a["id"]);
  // Streamed, the same answer as SSE chunks, with its usage when asked.
  json sb = json::parse(completion("stories", "Once upon a time", 12, true));
  sb["stream_options"] = {{"include_usage", true}};
  HttpResult sh = http(g.port(), "POST", "/v1/completions", sb.dump(), k1);
  ASSERT_EQ(sh.status, 200) << sh.body;
  EXPECT_EQ(sh.header("x-tierserve-cache"), "hit");
  EXPECT_EQ(sh.header("content-type"), "text/event-stream");
  std::string text;
  bool usage = false;
  const auto ev = sse_events(sh.body);
  ASSERT_GE(ev.size(), 3u) << sh.body;
  EXPECT_EQ(ev.back(), "data: [DONE]");
  for (const auto& e : ev) {
    if (e == "data: [DONE]") continue;
    const json c = json::parse(e.substr(6));
    if (!c["choices"].empty()) text += c["choices"][0]["text"].get<std::string>();
    if (c.contains("usage") && c["usage"].is_object()) usage = c["usage"]["completion_tokens"] == a["usage"]["completion_tokens"];
  }
  EXPECT_EQ(text, a["choices"][0]["text"].get<std::string>());
  EXPECT_TRUE(usage) << sh.body;
  EXPECT_EQ(placements(), placed);
  // A hit counts against the key's requests: its fifth request of the minute is the last.
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", req, k1).status, 200);
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", req, k1).status, 200);
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", req, k1).status, 429);
  // Another key has a cache of its own.
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", req, k2).header("x-tierserve-cache"), "miss");
  // A streamed miss (with its usage) is kept too, and answers a body later.
  json s2 = json::parse(completion("stories", "The cat", 10, true));
  s2["stream_options"] = {{"include_usage", true}};
  HttpResult sm = http(g.port(), "POST", "/v1/completions", s2.dump(), k2);
  ASSERT_EQ(sm.status, 200) << sm.body;
  EXPECT_EQ(sm.header("x-tierserve-cache"), "miss");
  HttpResult sm2 = http(g.port(), "POST", "/v1/completions", completion("stories", "The cat", 10, false), k2);
  EXPECT_EQ(sm2.header("x-tierserve-cache"), "hit") << sm2.body;
  // Not cached: errors, and requests that are not deterministic.
  const std::string bad = completion("stories", "Once", 100000, false);
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", bad, k2).status, 400);
  HttpResult again = http(g.port(), "POST", "/v1/completions", bad, k2);
  EXPECT_EQ(again.status, 400);
  EXPECT_EQ(again.header("x-tierserve-cache"), "miss");
  json warm = json::parse(completion("stories", "Once", 4, false));
  warm["temperature"] = 0.7;
  HttpResult w = http(g.port(), "POST", "/v1/completions", warm.dump(), k2);
  EXPECT_EQ(w.status, 200);
  EXPECT_EQ(w.header("x-tierserve-cache"), "");
  const std::string m = http(g.port(), "GET", "/metrics", "", k2).body;
  EXPECT_EQ(metric_sum(m, "tierserve_gateway_cache_requests_total{result=\"hit\"}"), 5) << m;
  EXPECT_GT(metric_sum(m, "tierserve_gateway_cache_bytes"), 0) << m;
  EXPECT_EQ(metric_sum(m, "tierserve_gateway_cache_entries"), 3) << m;
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
}

// The response cache in Redis, shared by two replicas: a miss on one is a hit on the other;
// an entry that does not parse is dropped and counted, never served; Redis gone, requests
// are answered by the workers (misses), and the failures counted.
TEST(Gateway, TwoReplicasShareTheCacheInRedis) {
  prepare();
  if (!have_redis()) GTEST_SKIP() << "no redis-server";
  Redis redis;
  ASSERT_TRUE(redis.start("redis-cache")) << testing_proc::slurp(kWork + "/redis-cache.err");
  ServerProcess worker(kWork, "cache-worker");
  ASSERT_TRUE(worker.start_command(TS_TIERSERVE_BIN, "serve", "model: {path: '" + kStories + "', threads: 1, served_name: stories}\n", {}))
      << worker.stderr_text();
  const std::string cfg = "workers:\n  - {name: w, kind: tierserve, model: stories, url: 'http://127.0.0.1:" +
                          std::to_string(worker.port()) + "'}\n" + kHealth + "redis: {host: 127.0.0.1, port: " +
                          std::to_string(redis.port) + ", timeout_ms: 200}\ncache: {backend: redis, ttl_ms: 60000}\n";
  ServerProcess a(kWork, "cache-a"), b(kWork, "cache-b");
  ASSERT_TRUE(a.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/cache-a.d"})) << a.stderr_text();
  ASSERT_TRUE(b.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/cache-b.d"})) << b.stderr_text();
  ASSERT_TRUE(wait_up(a.port())) << a.stderr_text();
  ASSERT_TRUE(wait_up(b.port())) << b.stderr_text();
  const std::string req = completion("stories", "Once upon a time", 12, false);
  HttpResult m1 = http(a.port(), "POST", "/v1/completions", req);
  ASSERT_EQ(m1.status, 200) << m1.body;
  EXPECT_EQ(m1.header("x-tierserve-cache"), "miss");
  HttpResult h1 = http(b.port(), "POST", "/v1/completions", req);
  ASSERT_EQ(h1.status, 200) << h1.body;
  EXPECT_EQ(h1.header("x-tierserve-cache"), "hit");
  EXPECT_EQ(body_json(h1)["choices"][0]["text"], body_json(m1)["choices"][0]["text"]);
  // Corrupt every entry: the next request is a miss answered by the worker, the entry dropped.
  ASSERT_EQ(std::system(("for k in $(redis-cli -p " + std::to_string(redis.port) +
                         " --scan --pattern 'tierserve:cache:*'); do redis-cli -p " + std::to_string(redis.port) +
                         " SET \"$k\" '{not json' > /dev/null; done")
                            .c_str()),
            0);
  HttpResult c1 = http(b.port(), "POST", "/v1/completions", req);
  ASSERT_EQ(c1.status, 200) << c1.body;
  EXPECT_EQ(c1.header("x-tierserve-cache"), "miss");
  EXPECT_EQ(body_json(c1)["choices"][0]["text"], body_json(m1)["choices"][0]["text"]);
  std::string m = http(b.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric_sum(m, "tierserve_gateway_cache_errors_total{kind=\"corrupt_entry\"}"), 1) << m;
  EXPECT_EQ(http(a.port(), "POST", "/v1/completions", req).header("x-tierserve-cache"), "hit");  // stored again by b
  // Redis gone: answered by the worker, counted.
  redis.stop();
  HttpResult d1 = http(a.port(), "POST", "/v1/completions", req);
  EXPECT_EQ(d1.status, 200) << d1.body;
  EXPECT_EQ(d1.header("x-tierserve-cache"), "miss");
  m = http(a.port(), "GET", "/metrics").body;
  EXPECT_GE(metric_sum(m, "tierserve_gateway_cache_errors_total{kind=\"redis\"}"), 1) << m;
  EXPECT_EQ(a.stop(SIGTERM), 0) << a.stderr_text();
  EXPECT_EQ(b.stop(SIGTERM), 0) << b.stderr_text();
}

}  // namespace
}  // namespace ts
