// `tierserve serve` as an operator runs it, a real process on loopback: connections over
// the limit answered 503, a downgraded stream said in headers and in band, /metrics on its
// own listener, SIGTERM drain, KV usage and queued-stream notices, version and logs that
// never hold a key, bad configs exit 2.
#define TS_SERVE_TEST_DIR "server_ops_test"
#include "testing/serve.h"

namespace ts {
namespace {

TEST(ServeConnections, MaxConnectionsRefusesTheExtraConnectionWith503) {
  make_dirs_and_models();
  const std::string cfg = "http: {max_connections: 2}\n";
  ServerProcess srv(kWork, "conns");
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN, cfg, {"-m", kStories, "-t", "1"})) << srv.stderr_text();
  const std::string printed = run_capture(std::string(TS_TIERSERVE_BIN) + " serve -c " + kWork + "/conns.yaml --print-config");
  EXPECT_NE(printed.find("max_connections: 2"), std::string::npos) << printed;

  const int a = connect_to(srv.port()), b = connect_to(srv.port());
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_EQ(request_on(a, "GET", "/health/live").status, 200);
  ASSERT_EQ(request_on(b, "GET", "/health/live").status, 200);

  const HttpResult third = http(srv.port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})");
  ASSERT_EQ(third.status, 503) << third.body;
  EXPECT_GE(std::atoi(third.header("retry-after").c_str()), 1);
  EXPECT_EQ(third.header("connection"), "close");
  EXPECT_EQ(body_json(third)["error"]["type"], "server_error");
  EXPECT_EQ(body_json(third)["error"]["code"], "overloaded");

  // The open connections still work, and the stats count them.
  const HttpResult c = request_on(a, "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})");
  EXPECT_EQ(c.status, 200) << c.body;
  const HttpResult st = request_on(b, "GET", "/admin/stats");
  ASSERT_EQ(st.status, 200);
  EXPECT_EQ(body_json(st)["connections"]["open"], 2) << st.body;
  EXPECT_EQ(body_json(st)["connections"]["max"], 2);
  EXPECT_GE(body_json(st)["connections"]["rejected"].get<int>(), 1);
  const HttpResult met = request_on(b, "GET", "/metrics");
  ASSERT_EQ(met.status, 200);
  EXPECT_NE(met.body.find("\ntierserve_http_connections_open 2\n"), std::string::npos) << met.body;
  EXPECT_NE(met.body.find("\ntierserve_http_connections_rejected_total " +
                          std::to_string(body_json(st)["connections"]["rejected"].get<int>()) + "\n"),
            std::string::npos);

  // A client that vanishes (reset, no goodbye) gives its slot back: a new connection gets in.
  linger lg{1, 0};
  ::setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(a);
  const auto t0 = std::chrono::steady_clock::now();
  HttpResult fresh;
  for (;;) {
    fresh = http(srv.port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})");
    if (fresh.status != 503) break;
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << "the slot was not freed";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(fresh.status, 200) << fresh.body;
  // That one closed after its response ("Connection: close"): one open again (b's).
  json now;
  for (;;) {
    now = body_json(request_on(b, "GET", "/admin/stats"));
    if (now["connections"]["open"] == 1) break;
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << now.dump();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(b);
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.stderr_text();
}

// ---------------------------------------------------------------------------------------
// Explicit degradation in a real stream: ultrafast runs one request at a time and gives up
// waiting after 300 ms (downgrade to standard); the second ultrafast stream is served on
// standard, says so in its headers and in-band, and its chunks carry the served tier.

TEST(ServeDegrade, DowngradedStreamSaysSoInHeadersAndInBand) {
  make_dirs_and_models();
  ServerProcess srv(kWork, "degrade");
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN,
                        "tiers:\n"
                        "  - {name: ultrafast, max_batch: 1, max_queue_wait_ms: 300, on_timeout: 'downgrade:standard'}\n"
                        "  - {name: standard}\n  - {name: batch}\n",
                        {"-m", kSlowModel, "-t", "1"}))
      << srv.stderr_text();
  const std::string req = R"({"prompt":"Once upon a time","max_tokens":1500,"ignore_eos":true,"stream":true,"service_tier":"priority"})";
  OpenRequest first(srv.port(), "POST", "/v1/completions", req);
  ASSERT_TRUE(first.read_until("data: ")) << first.raw();
  EXPECT_NE(first.raw().find("x-tierserve-tier-served: ultrafast"), std::string::npos);
  OpenRequest second(srv.port(), "POST", "/v1/completions",
                     R"({"prompt":"Once upon a time","max_tokens":8,"stream":true,"service_tier":"priority"})");
  const HttpResult r = second.finish();
  first.close();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-tier-requested"), "ultrafast");
  // The headers go out at admission: they say standard when the server knew at once
  // (predicted_wait), ultrafast when the request was downgraded while queued (after 300 ms).
  const std::string served = r.header("x-tierserve-tier-served");
  EXPECT_TRUE(served == "standard" || served == "ultrafast") << served;
  if (served == "standard") {
    const std::string reason = r.header("x-tierserve-degraded-reason");
    EXPECT_TRUE(reason == "queue_timeout" || reason == "predicted_wait") << reason;
  }
  const auto ev = sse_events(r.body);
  ASSERT_GE(ev.size(), 3u);
  // Said in-band before any token, whatever the headers knew; the chunks carry the
  // served tier's OpenAI value.
  size_t first_data = 0;
  while (first_data < ev.size() && ev[first_data].rfind("data: ", 0) != 0) ++first_data;
  ASSERT_LT(first_data, ev.size()) << r.body;
  bool said = false;
  for (size_t i = 0; i < first_data; ++i)
    said = said || ev[i].rfind(": tierserve tier_changed from=ultrafast to=standard reason=", 0) == 0;
  EXPECT_TRUE(said) << r.body;
  EXPECT_EQ(json::parse(ev[first_data].substr(6))["service_tier"], "default");
  EXPECT_EQ(ev.back(), "data: [DONE]");
  const std::string metrics = http(srv.port(), "GET", "/metrics").body;
  EXPECT_NE(metrics.find("tierserve_degradations_total{tier_requested=\"ultrafast\",tier_served=\"standard\""),
            std::string::npos)
      << metrics.substr(0, 3000);
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.stderr_text();
}

TEST(ServeAdmin, MetricsOnTheirOwnListener) {
  make_dirs_and_models();
  ServerProcess srv(kWork, "admin");
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN, "", {"-m", kStories, "-t", "1", "--admin-port", "0"})) << srv.stderr_text();
  const std::string out = srv.stdout_text();
  const size_t at = out.find("admin on http://127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << out;
  const int admin = std::atoi(out.c_str() + at + std::string("admin on http://127.0.0.1:").size());
  ASSERT_GT(admin, 0);
  EXPECT_EQ(http(admin, "GET", "/metrics").status, 200);
  EXPECT_EQ(http(admin, "GET", "/admin/stats").status, 200);
  EXPECT_EQ(http(admin, "GET", "/health/ready").status, 200);
  EXPECT_EQ(http(admin, "POST", "/v1/completions", R"({"prompt":"Hi"})").status, 404);
  EXPECT_EQ(http(srv.port(), "GET", "/metrics").status, 404);
  EXPECT_EQ(http(srv.port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":1})").status, 200);
  EXPECT_EQ(srv.stop(SIGINT), 0) << srv.stderr_text();
}

// ---------------------------------------------------------------------------------------
// Drain: SIGTERM lets the in-flight request finish, refuses new work, exits 0.

TEST(ServeDrain, SigtermFinishesInFlightThenExitsZero) {
  make_dirs_and_models();
  ServerProcess srv(kWork, "drain");
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN, "drain_timeout_ms: 20000\n", {"-m", kSlowModel, "-t", "1"})) << srv.stderr_text();
  OpenRequest inflight(srv.port(), "POST", "/v1/completions",
                       R"({"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true,"stream":true,
                           "stream_options":{"include_usage":true}})");
  ASSERT_TRUE(inflight.read_until("data: ")) << inflight.raw();
  srv.signal(SIGTERM);
  // New work is refused: the listener is closed (connection refused) or, on a connection
  // accepted before, 503.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const HttpResult late = http(srv.port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})");
  EXPECT_TRUE(late.status == 0 || late.status == 503) << late.status;
  const HttpResult done = inflight.finish();
  ASSERT_EQ(done.status, 200);
  const auto ev = sse_events(done.body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "data: [DONE]");
  EXPECT_EQ(json::parse(ev[ev.size() - 2].substr(6))["usage"]["completion_tokens"], 300);
  EXPECT_EQ(srv.wait(30), 0) << srv.stderr_text();
  EXPECT_NE(srv.stderr_text().find("draining"), std::string::npos);
}

// ---------------------------------------------------------------------------------------
// What an operator expects: the gauges gateways route on, streams behind proxies, logs.

double scrape_value(int port, const std::string& series) {
  const std::string m = http(port, "GET", "/metrics").body;
  const size_t at = m.find("\n" + series + " ");
  return at == std::string::npos ? -1.0 : std::atof(m.c_str() + at + series.size() + 2);
}

TEST(ServeOperator, KvUsageRisesDuringARequestAndFallsAfter) {
  make_dirs_and_models();
  ServerProcess srv(kWork, "kvuse");
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN, "metrics: {vllm_names: true}\n", {"-m", kSlowModel, "-t", "1"}))
      << srv.stderr_text();
  EXPECT_EQ(scrape_value(srv.port(), "tierserve_kv_cache_usage_ratio"), 0.0);
  EXPECT_EQ(scrape_value(srv.port(), "tierserve_num_requests_running"), 0.0);
  OpenRequest r(srv.port(), "POST", "/v1/completions",
                R"({"prompt":"Once upon a time","max_tokens":400,"ignore_eos":true,"stream":true})");
  ASSERT_TRUE(r.read_until("data: ")) << r.raw();
  double during = 0;
  for (int i = 0; i < 200 && during <= 0; ++i) {
    during = scrape_value(srv.port(), "tierserve_kv_cache_usage_ratio");
    if (during <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT(during, 0.0);
  EXPECT_LE(during, 1.0);
  EXPECT_EQ(scrape_value(srv.port(), "tierserve_num_requests_running"), 1.0);
  EXPECT_GT(scrape_value(srv.port(), "vllm:kv_cache_usage_perc{model_name=\"llama15m_q8_0\"}"), 0.0);
  const HttpResult done = r.finish();
  ASSERT_EQ(done.status, 200);
  double after = 1;
  for (int i = 0; i < 500 && after != 0; ++i) {
    after = scrape_value(srv.port(), "tierserve_kv_cache_usage_ratio");
    if (after != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(after, 0.0);
  EXPECT_EQ(scrape_value(srv.port(), "vllm:num_requests_running{model_name=\"llama15m_q8_0\"}"), 0.0);
  EXPECT_GT(scrape_value(srv.port(), "tierserve_prefix_cache_queries_total"), 0.0);
  EXPECT_EQ(srv.stop(), 0);
}

// A stream that waits in a queue has its headers at admission and a ": queued" comment
// while it waits; then it is served as usual.
TEST(ServeOperator, QueuedStreamHasItsHeadersAtOnceAndQueuedComments) {
  make_dirs_and_models();
  ServerProcess srv(kWork, "queued");
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN, "http: {queued_notice_ms: 100}\ntiers:\n  - {name: standard, max_batch: 1}\n",
                        {"-m", kSlowModel, "-t", "1"}))
      << srv.stderr_text();
  OpenRequest first(srv.port(), "POST", "/v1/completions",
                    R"({"prompt":"Once upon a time","max_tokens":600,"ignore_eos":true,"stream":true})");
  ASSERT_TRUE(first.read_until("data: ")) << first.raw();
  OpenRequest second(srv.port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":4,"stream":true})");
  ASSERT_TRUE(second.read_until("\r\n\r\n")) << second.raw();
  EXPECT_EQ(second.raw().rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_NE(second.raw().find("X-Accel-Buffering: no"), std::string::npos);
  ASSERT_TRUE(second.read_until(": queued")) << second.raw();
  EXPECT_EQ(second.raw().find("data: {"), std::string::npos) << "queued comments come before any token";
  const HttpResult a = first.finish(), b = second.finish();
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(sse_events(b.body).back(), "data: [DONE]");
  EXPECT_EQ(srv.stop(), 0);
}

TEST(ServeOperator, VersionAndLogsThatNeverHoldAKey) {
  make_dirs_and_models();
  const std::string v = run_capture(std::string(TS_TIERSERVE_BIN) + " --version");
  EXPECT_NE(v.find("tierserve 0."), std::string::npos) << v;
  EXPECT_NE(v.find("(git "), std::string::npos) << v;
  EXPECT_NE(v.find("compiler: "), std::string::npos) << v;
  EXPECT_NE(v.find("kernels: "), std::string::npos) << v;
  const std::string key = "sk-secret-operator-key";
  ServerProcess srv(kWork, "logs");
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN, "keys:\n  - {name: team-a, sha256: " + hash_key(key) + "}\n",
                        {"-m", kStories, "-t", "1", "--log-format", "json"}))
      << srv.stderr_text();
  const HttpResult r = http(srv.port(), "POST", "/v1/completions", R"({"prompt":"Hello there secret prompt","max_tokens":2})",
                            {{"Authorization", "Bearer " + key}, {"X-Request-Id", "op-1"}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-request-id"), "op-1");
  EXPECT_EQ(srv.stop(), 0);
  const std::string log = srv.stderr_text();
  EXPECT_EQ(log.find(key), std::string::npos) << "the key is in the log";
  EXPECT_EQ(log.find("secret prompt"), std::string::npos) << "the prompt is in the log";
  // Every line is a JSON object with an RFC 3339 timestamp; one access line for the request.
  std::istringstream lines(log);
  std::string line;
  int n_access = 0;
  while (std::getline(lines, line)) {
    const json j = json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_TRUE(j["ts"].is_string() && j["ts"].get<std::string>().size() == 24) << line;
    if (j["msg"] == "access") {
      ++n_access;
      EXPECT_EQ(j["request_id"], "op-1");
      EXPECT_EQ(j["key"], "team-a");
      EXPECT_EQ(j["route"], "POST /v1/completions");
      EXPECT_EQ(j["status"], 200);
      EXPECT_EQ(j["tier_requested"], "standard");
      EXPECT_EQ(j["tier_served"], "standard");
      EXPECT_EQ(j["completion_tokens"], 2);
      EXPECT_TRUE(j["e2e_ms"].is_number());
      EXPECT_TRUE(j["client"].get<std::string>().rfind("127.0.0.1:", 0) == 0) << line;
    }
  }
  EXPECT_EQ(n_access, 1) << log;
}

TEST(ServeConfigErrors, BadConfigExitsTwoWithAMessage) {
  make_dirs_and_models();
  ServerProcess srv(kWork, "badcfg");
  EXPECT_FALSE(srv.start(TS_TIERSERVE_BIN, "tiers:\n  - {name: a, share_min: 2}\n", {"-m", kStories}));
  EXPECT_NE(srv.stderr_text().find("share_out_of_range"), std::string::npos) << srv.stderr_text();
  const std::string out = run_capture(std::string(TS_TIERSERVE_BIN) + " serve --port 0 --tier gold.priority=1 2>&1; echo rc=$?");
  EXPECT_NE(out.find("no tier named 'gold'"), std::string::npos) << out;
  EXPECT_NE(out.find("rc=2"), std::string::npos) << out;
  const std::string out2 = run_capture(std::string(TS_TIERSERVE_BIN) + " serve -c /nonexistent.yaml 2>&1; echo rc=$?");
  EXPECT_NE(out2.find("cannot read config file"), std::string::npos) << out2;
  EXPECT_NE(out2.find("rc=2"), std::string::npos) << out2;
  // --set and the environment name what they set wrong.
  const std::string out3 =
      run_capture(std::string(TS_TIERSERVE_BIN) + " serve --set scheduler.bogus=1 --print-config 2>&1; echo rc=$?");
  EXPECT_NE(out3.find("--set scheduler.bogus"), std::string::npos) << out3;
  EXPECT_NE(out3.find("rc=2"), std::string::npos) << out3;
  const std::string out4 = run_capture("TIERSERVE_HTTP__THREADS=many " + std::string(TS_TIERSERVE_BIN) +
                                       " serve --print-config 2>&1; echo rc=$?");
  EXPECT_NE(out4.find("TIERSERVE_HTTP__THREADS (environment)"), std::string::npos) << out4;
  EXPECT_NE(out4.find("rc=2"), std::string::npos) << out4;
  const std::string out5 = run_capture("TIERSERVE_HTTP__THREADS=3 " + std::string(TS_TIERSERVE_BIN) +
                                       " serve --set http.max_connections=7 --print-config 2>&1; echo rc=$?");
  EXPECT_NE(out5.find("threads: 3"), std::string::npos) << out5;
  EXPECT_NE(out5.find("max_connections: 7"), std::string::npos) << out5;
  EXPECT_NE(out5.find("rc=0"), std::string::npos) << out5;
}

}  // namespace
}  // namespace ts
