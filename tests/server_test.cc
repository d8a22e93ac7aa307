// Black-box tests of `tierserve serve`: the real binary on port 0 with real models
// (stories260K, and a random-weight 15M llama from make-model where a request must run
// long enough to be overtaken), over real sockets.
#define TS_SERVE_TEST_DIR "server_test"
#include "testing/serve.h"

namespace ts {
namespace {

class ServeBasic : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    make_dirs_and_models();
    srv = new ServerProcess(kWork, "basic");
    ASSERT_TRUE(srv->start(TS_TIERSERVE_BIN, "limits: {max_header_bytes: 4096, max_body_bytes: 16384}\nhttp: {threads: 2}\n",
                           {"-m", kStories, "-t", "1"}))
        << srv->stderr_text();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(srv->stop(SIGTERM), 0) << srv->stderr_text();
    delete srv;
  }
  static HttpResult post(const std::string& path, const std::string& body) { return http(srv->port(), "POST", path, body); }
  static ServerProcess* srv;
};
ServerProcess* ServeBasic::srv = nullptr;

TEST_F(ServeBasic, PrintsTheBoundAddress) {
  EXPECT_NE(srv->stdout_text().find("listening on http://127.0.0.1:" + std::to_string(srv->port())), std::string::npos)
      << srv->stdout_text();
}

TEST_F(ServeBasic, CompletionMatchesTheGreedyGolden) {
  const HttpResult r = post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":64,"temperature":0,"stop":["Lily"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = body_json(r);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["choices"][0]["text"], ", there was a little girl named ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_GT(j["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_EQ(j["service_tier"], "default");  // OpenAI's value for the tier that served
  EXPECT_EQ(j["tierserve"]["tier_served"], "standard");
  EXPECT_GE(j["tierserve"]["ttft_ms"].get<double>(), 0.0);
  EXPECT_EQ(r.header("x-tierserve-tier-requested"), "standard");
  EXPECT_EQ(r.header("x-tierserve-tier-served"), "standard");
  EXPECT_EQ(r.header("x-tierserve-degraded-reason"), "");
  EXPECT_EQ(r.header("content-type"), "application/json");
}

// top_p 0 (allowed by OpenAI's API) keeps only the most probable token: greedy at any
// temperature.
TEST_F(ServeBasic, TopPZeroSamplesTheGreedyGolden) {
  const HttpResult r = post("/v1/completions", R"({"prompt":"Once upon a time","max_tokens":64,"temperature":1.5,
                                                   "top_p":0,"seed":7,"stop":["Lily"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body_json(r)["choices"][0]["text"], ", there was a little girl named ");
}

// logit_bias on the golden greedy tokens of stories260K (", there" = ids 432, 383; a
// vocabulary of 512): -100 bans the first, +100 forces the second at every position.
TEST_F(ServeBasic, LogitBiasSteersGreedyDecoding) {
  const std::string req = R"({"prompt":"Once upon a time","max_tokens":4,"temperature":0,"logprobs":0)";
  const auto tokens = [&](const std::string& extra) {
    const HttpResult r = post("/v1/completions", req + extra + "}");
    EXPECT_EQ(r.status, 200) << r.body;
    return body_json(r)["choices"][0]["logprobs"]["tokens"].get<std::vector<std::string>>();
  };
  const std::vector<std::string> plain = tokens("");
  ASSERT_EQ(plain.size(), 4u);
  EXPECT_EQ(plain[0] + plain[1], ", there");
  const std::vector<std::string> banned = tokens(R"(,"logit_bias":{"432":-100})");
  ASSERT_EQ(banned.size(), 4u);
  EXPECT_NE(banned[0], plain[0]);
  EXPECT_EQ(tokens(R"(,"logit_bias":{"383":100,"511":0})"), std::vector<std::string>(4, plain[1]));
  const HttpResult past = post("/v1/completions", req + R"(,"logit_bias":{"512":1}})");
  EXPECT_EQ(past.status, 400);
  EXPECT_EQ(body_json(past)["error"]["param"], "logit_bias");
  EXPECT_EQ(body_json(past)["error"]["code"], "invalid_value");
}

// A prompt of token ids (stories260K's golden prompt, BOS included) completes as its text.
TEST_F(ServeBasic, TokenIdPromptEqualsTextPrompt) {
  const HttpResult r = post("/v1/completions", R"({"prompt":[1,403,407,261,378],"max_tokens":64,"temperature":0,
                                                   "stop":["Lily"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body_json(r)["choices"][0]["text"], ", there was a little girl named ");
  EXPECT_EQ(body_json(r)["usage"]["prompt_tokens"], 5);
  const HttpResult nested = post("/v1/completions", R"({"prompt":[[1,403,407,261,378]],"max_tokens":3,"temperature":0})");
  ASSERT_EQ(nested.status, 200) << nested.body;
  EXPECT_EQ(body_json(nested)["choices"][0]["text"], ", there was");
  const HttpResult past = post("/v1/completions", R"({"prompt":[1,512],"max_tokens":1})");
  EXPECT_EQ(past.status, 400);
  EXPECT_EQ(body_json(past)["error"]["param"], "prompt");
}

TEST_F(ServeBasic, ChatWithTheFallbackTemplate) {
  const HttpResult r = post("/v1/chat/completions",
                            R"({"messages":[{"role":"system","content":"Tell stories."},{"role":"user","content":"Hi"}],
                                "max_completion_tokens":8,"temperature":0})");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = body_json(r);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_GT(j["usage"]["prompt_tokens"].get<int>(), 10);  // the ChatML wrapping
}

TEST_F(ServeBasic, ServiceTierMapping) {
  // Asked for -> tierserve's tier (header) -> OpenAI's value in the body.
  const std::tuple<const char*, const char*, const char*> cases[] = {
      {"priority", "ultrafast", "priority"}, {"fast", "ultrafast", "priority"}, {"default", "standard", "default"},
      {"auto", "standard", "default"},       {"scale", "standard", "default"}, {"flex", "batch", "flex"},
      {"batch", "batch", "flex"},            {"ultrafast", "ultrafast", "priority"}};
  for (const auto& [asked, tier, openai] : cases) {
    const HttpResult r = post("/v1/completions", std::string(R"({"prompt":"Hi","max_tokens":2,"service_tier":")") + asked + "\"}");
    ASSERT_EQ(r.status, 200) << asked << r.body;
    EXPECT_EQ(body_json(r)["service_tier"], openai) << asked;
    EXPECT_EQ(body_json(r)["tierserve"]["tier_served"], tier) << asked;
    EXPECT_EQ(r.header("x-tierserve-tier-served"), tier);
  }
  const HttpResult bad = post("/v1/completions", R"({"prompt":"Hi","service_tier":"platinum"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(body_json(bad)["error"]["param"], "service_tier");
}

TEST_F(ServeBasic, StreamingWithUsageAndDone) {
  const std::string req = R"({"prompt":"Once upon a time","max_tokens":30,"temperature":0)";
  const HttpResult plain = post("/v1/completions", req + "}");
  ASSERT_EQ(plain.status, 200);
  const HttpResult s = post("/v1/completions", req + R"(,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.header("content-type"), "text/event-stream");
  EXPECT_EQ(s.header("transfer-encoding"), "chunked");
  EXPECT_EQ(s.header("x-tierserve-tier-served"), "standard");
  const auto events = sse_events(s.body);
  ASSERT_GE(events.size(), 4u) << s.body;
  EXPECT_EQ(events.back(), "data: [DONE]");
  std::string text;
  std::string finish;
  json usage;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_EQ(events[i].rfind("data: ", 0), 0u) << events[i];
    const json c = json::parse(events[i].substr(6));
    EXPECT_EQ(c["object"], "text_completion");
    EXPECT_EQ(c["id"], json::parse(events[0].substr(6))["id"]);
    if (c["choices"].empty()) {
      usage = c["usage"];
      EXPECT_EQ(i, events.size() - 2) << "the usage chunk comes last";
      continue;
    }
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, body_json(plain)["choices"][0]["text"]) << "streamed and plain greedy output differ";
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage["completion_tokens"], 30);
  EXPECT_EQ(usage["prompt_tokens"], 5);

  // Chat stream without include_usage: role in the first delta, no usage chunk.
  const HttpResult c = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":5,"stream":true})");
  ASSERT_EQ(c.status, 200);
  const auto ce = sse_events(c.body);
  ASSERT_GE(ce.size(), 3u);
  EXPECT_EQ(json::parse(ce[0].substr(6))["choices"][0]["delta"]["role"], "assistant");
  for (size_t i = 0; i + 1 < ce.size(); ++i) EXPECT_FALSE(json::parse(ce[i].substr(6))["choices"].empty());
  EXPECT_EQ(ce.back(), "data: [DONE]");
}

TEST_F(ServeBasic, BadInputIs400WithAnOpenAiError) {
  const std::string long_prompt = [] {
    std::string s;
    for (int i = 0; i < 60; ++i) s += "Once upon a time ";
    return s;
  }();
  const std::pair<std::string, std::string> cases[] = {
      {"{\"prompt\": \"Hi\"", "invalid_json"},
      {"", "invalid_json"},
      {"{\"prompt\": \"Hi \xff\xfe\"}", "invalid_json"},
      {R"({"prompt":"Hi","n":2})", "unsupported_parameter"},
      {R"({"prompt":"Hi","max_tokens":-1})", "invalid_value"},
      {R"({"prompt":"Hi","max_tokens":100000000000000000000})", "invalid_value"},
      {R"({"prompt":"Hi","max_tokens":100000})", "invalid_value"},
      {R"({"prompt":"Hi","temperature":"hot"})", "invalid_type"},
      {R"({"prompt":")" + long_prompt + R"("})", "context_length_exceeded"},
  };
  for (const auto& [body, code] : cases) {
    const HttpResult r = post("/v1/completions", body);
    EXPECT_EQ(r.status, 400) << body;
    const json j = body_json(r);
    EXPECT_EQ(j["error"]["code"], code) << body << " -> " << r.body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(j["error"]["message"].is_string());
  }
  const HttpResult role = post("/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"x"}]})");
  EXPECT_EQ(role.status, 400);
  EXPECT_EQ(body_json(role)["error"]["param"], "messages[0].role");
  EXPECT_EQ(http(srv->port(), "GET", "/v1/nothing").status, 404);
  const HttpResult m = http(srv->port(), "GET", "/v1/chat/completions");
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.header("allow"), "POST");
  // Still serving after all that.
  EXPECT_EQ(post("/v1/completions", R"({"prompt":"Hi","max_tokens":1})").status, 200);
}

TEST_F(ServeBasic, HeaderAndBodyLimits) {
  const HttpResult big_header =
      http(srv->port(), "GET", "/v1/models", "", {{"X-Filler", std::string(6000, 'a')}});
  EXPECT_EQ(big_header.status, 431);
  const HttpResult big_body = post("/v1/completions", "{\"prompt\":\"" + std::string(20000, 'a') + "\"}");
  EXPECT_EQ(big_body.status, 413);
  EXPECT_EQ(body_json(big_body)["error"]["code"], "body_too_large");
  // Garbage instead of HTTP: a 400 and a closed connection, never a crash.
  const int fd = connect_to(srv->port());
  ASSERT_GE(fd, 0);
  send_all(fd, "\x16\x03\x01 not http at all\r\n\r\n");
  char buf[512];
  const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
  ::close(fd);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, size_t(n)).rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(http(srv->port(), "GET", "/health/live").status, 200);
}

TEST_F(ServeBasic, KeepAliveServesSeveralRequestsOnOneConnection) {
  const int fd = connect_to(srv->port());
  ASSERT_GE(fd, 0);
  const std::string one = "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(send_all(fd, one + one));  // pipelined
  std::string raw;
  char buf[4096];
  const std::string body = R"({"status":"live"})";
  while (raw.find(body) == std::string::npos || raw.find(body, raw.find(body) + 1) == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << raw;
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  EXPECT_EQ(raw.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_NE(raw.find("HTTP/1.1 200", 5), std::string::npos);
}

TEST_F(ServeBasic, ModelsMetricsHealthStats) {
  const HttpResult m = http(srv->port(), "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(body_json(m)["data"][0]["id"], "stories260K");
  const HttpResult p = http(srv->port(), "GET", "/metrics");
  ASSERT_EQ(p.status, 200);
  EXPECT_NE(p.header("content-type").find("text/plain"), std::string::npos);
  EXPECT_NE(p.body.find("tierserve_requests_total{"), std::string::npos) << p.body.substr(0, 2000);
  EXPECT_NE(p.body.find("tierserve_time_to_first_token_seconds_bucket{"), std::string::npos);
  EXPECT_EQ(http(srv->port(), "GET", "/health/live").status, 200);
  EXPECT_EQ(http(srv->port(), "GET", "/health/ready").status, 200);
  const HttpResult s = http(srv->port(), "GET", "/admin/stats");
  ASSERT_EQ(s.status, 200);
  EXPECT_FALSE(body_json(s)["draining"].get<bool>());
}

// ---------------------------------------------------------------------------------------
// Server B: keys, on the slow model (a stream must still run while the test acts).

class ServeKeys : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    make_dirs_and_models();
    const std::string cfg = "keys:\n"
                            "  - {name: limited, sha256: " + hash_key("sk-limited") +
                            ", tiers: [standard, batch], default_tier: batch, requests_per_min: 3, max_concurrent: 1}\n"
                            "  - {name: gold, sha256: " + hash_key("sk-gold") + "}\n";
    srv = new ServerProcess(kWork, "keys");
    ASSERT_TRUE(srv->start(TS_TIERSERVE_BIN, cfg, {"-m", kSlowModel, "-t", "1"})) << srv->stderr_text();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(srv->stop(SIGTERM), 0) << srv->stderr_text();
    delete srv;
  }
  static std::vector<std::pair<std::string, std::string>> auth(const std::string& k) {
    return {{"Authorization", "Bearer " + k}};
  }
  static ServerProcess* srv;
};
ServerProcess* ServeKeys::srv = nullptr;

TEST_F(ServeKeys, EveryRouteButHealthNeedsAKey) {
  const HttpResult none = http(srv->port(), "POST", "/v1/completions", R"({"prompt":"Hi"})");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(body_json(none)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(http(srv->port(), "POST", "/v1/completions", R"({"prompt":"Hi"})", auth("sk-nope")).status, 401);
  EXPECT_EQ(http(srv->port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(http(srv->port(), "GET", "/v1/models").status, 401);
  EXPECT_EQ(http(srv->port(), "GET", "/v1/models", "", auth("sk-gold")).status, 200);
  EXPECT_EQ(http(srv->port(), "GET", "/health/live").status, 200);
  EXPECT_EQ(http(srv->port(), "GET", "/health/ready").status, 200);
}

// One ordered story for the limited key (3 requests/min, 1 at a time, no ultrafast).
TEST_F(ServeKeys, DowngradeConcurrencyDisconnectAndRateLimit) {
  // 1. Asking for priority: served on standard, and told so.
  const HttpResult d = http(srv->port(), "POST", "/v1/completions",
                            R"({"prompt":"Hi","max_tokens":2,"service_tier":"priority"})", auth("sk-limited"));
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.header("x-tierserve-tier-requested"), "ultrafast");
  EXPECT_EQ(d.header("x-tierserve-tier-served"), "standard");
  EXPECT_EQ(d.header("x-tierserve-degraded-reason"), "not_entitled");
  EXPECT_EQ(body_json(d)["service_tier"], "default");
  EXPECT_EQ(body_json(d)["tierserve"]["degraded_reason"], "not_entitled");
  EXPECT_EQ(d.header("x-ratelimit-limit-requests"), "3");
  EXPECT_EQ(d.header("x-ratelimit-remaining-requests"), "2");
  EXPECT_FALSE(d.header("x-ratelimit-reset-requests").empty());

  // 2. A long stream (the key's default tier: batch) holds the key's one slot...
  auto stream = std::make_unique<OpenRequest>(
      srv->port(), "POST", "/v1/completions",
      R"({"prompt":"Once upon a time","max_tokens":1500,"ignore_eos":true,"stream":true})", auth("sk-limited"));
  ASSERT_TRUE(stream->read_until("data: ")) << stream->raw();
  EXPECT_NE(stream->raw().find("x-tierserve-tier-served: batch"), std::string::npos) << stream->raw();

  // 3. ...so a second concurrent request of the key is refused (and not charged).
  const HttpResult busy = http(srv->port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})", auth("sk-limited"));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(body_json(busy)["error"]["code"], "concurrency_limit_exceeded");
  EXPECT_EQ(busy.header("retry-after"), "1");

  // 4. The client goes away mid-stream: the sequence is freed within a step or so.
  auto active = [&] {
    return body_json(http(srv->port(), "GET", "/admin/stats", "", auth("sk-gold")));
  };
  EXPECT_EQ(active()["n_active"], 1);
  stream->close();
  const auto t0 = std::chrono::steady_clock::now();
  json st;
  for (;;) {
    st = active();
    if (st["n_active"] == 0 && st["n_engine_seqs"] == 0) break;
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << st.dump();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(st["kv"]["used"], 0) << st.dump();
  const std::string metrics = http(srv->port(), "GET", "/metrics", "", auth("sk-gold")).body;
  EXPECT_NE(metrics.find(R"(tierserve_requests_total{tier="batch",outcome="cancelled"} 1)"), std::string::npos)
      << metrics.substr(0, 4000);
  // The idle service's gauges say so too (no step runs after the cancel to refresh them).
  for (const char* g : {R"(tierserve_running_requests{tier="batch"} 0)", R"(tierserve_kv_blocks_used{tier="batch"} 0)"})
    EXPECT_NE(metrics.find(g), std::string::npos) << g << "\n" << metrics.substr(0, 4000);

  // 5. The slot is free again; this is the key's third request of the minute...
  const HttpResult third = http(srv->port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})", auth("sk-limited"));
  EXPECT_EQ(third.status, 200) << third.body;
  EXPECT_EQ(third.header("x-ratelimit-remaining-requests"), "0");
  // 6. ...and the fourth is over the limit: 429 with Retry-After (one request refills in 20 s).
  const HttpResult fourth = http(srv->port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})", auth("sk-limited"));
  EXPECT_EQ(fourth.status, 429);
  EXPECT_EQ(body_json(fourth)["error"]["code"], "rate_limit_exceeded");
  const int retry = std::atoi(fourth.header("retry-after").c_str());
  EXPECT_GE(retry, 1);
  EXPECT_LE(retry, 20);
  // Another key is not affected.
  EXPECT_EQ(http(srv->port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})", auth("sk-gold")).status, 200);
}

// ---------------------------------------------------------------------------------------
// Server C: tiny queues -> server-wide shedding is 503 + Retry-After.

TEST(ServeOverload, SheddingIs503WithRetryAfter) {
  make_dirs_and_models();
  ServerProcess srv(kWork, "overload");
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN,
                        "scheduler: {max_queued_requests_total: 1}\n"
                        "tiers:\n  - {name: ultrafast}\n  - {name: standard}\n  - {name: batch, max_batch: 1}\n",
                        {"-m", kSlowModel, "-t", "1"}))
      << srv.stderr_text();
  const std::string long_req = R"({"prompt":"Once upon a time","max_tokens":1500,"ignore_eos":true,"stream":true,"service_tier":"flex"})";
  OpenRequest running(srv.port(), "POST", "/v1/completions", long_req);
  ASSERT_TRUE(running.read_until("data: ")) << running.raw();
  // The batch tier runs one request at a time: the next one queues, the one after that
  // finds the global queue full with no lower tier to shed.
  OpenRequest queued(srv.port(), "POST", "/v1/completions", long_req);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const HttpResult shed = http(srv.port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":4,"service_tier":"flex"})");
  EXPECT_EQ(shed.status, 503) << shed.body;
  EXPECT_EQ(body_json(shed)["error"]["code"], "overloaded") << shed.body;
  EXPECT_GE(std::atoi(shed.header("retry-after").c_str()), 1);
  EXPECT_EQ(shed.header("x-tierserve-tier-requested"), "batch");
  running.close();
  queued.close();
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.stderr_text();
}

// ---------------------------------------------------------------------------------------
// Server D: a key with a tokens/min budget, on stories260K (fast: the whole story takes a
// fraction of the minute). Tokens are charged at admission as prompt + max_tokens, what a
// request did not generate is refunded when it ends, and the bucket refills at limit/60
// per second: a header may show more than the exact arithmetic, by at most the refill
// since the server started (bounded from the measured time, never assumed small).

// x-ratelimit-reset-* ("20ms", "1.5s", "6m0s") in milliseconds; -1 when malformed.
int64_t parse_reset_ms(const std::string& s) {
  if (s.size() > 2 && s.compare(s.size() - 2, 2, "ms") == 0) return std::atoll(s.c_str());
  if (s.empty() || s.back() != 's') return -1;
  double minutes = 0;
  std::string rest = s.substr(0, s.size() - 1);
  if (const size_t m = rest.find('m'); m != std::string::npos) {
    minutes = std::atof(rest.substr(0, m).c_str());
    rest = rest.substr(m + 1);
  }
  return int64_t(std::llround((minutes * 60 + std::atof(rest.c_str())) * 1000));
}

TEST(ServeTokenLimit, TokensPerMinuteChargesRefundsAndRefuses) {
  make_dirs_and_models();
  constexpr int64_t kLimit = 200;
  ServerProcess srv(kWork, "tokens");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(srv.start(TS_TIERSERVE_BIN,
                        "keys:\n"
                        "  - {name: tpm, sha256: " + hash_key("sk-tpm") + ", tokens_per_min: 200}\n"
                        "  - {name: tiny, sha256: " + hash_key("sk-tiny") + ", tokens_per_min: 50}\n"
                        "  - {name: free, sha256: " + hash_key("sk-free") + "}\n",
                        {"-m", kStories, "-t", "1"}))
      << srv.stderr_text();
  auto post = [&](const std::string& body, const std::string& key = "sk-tpm") {
    return http(srv.port(), "POST", "/v1/completions", body, {{"Authorization", "Bearer " + key}});
  };
  // An upper bound of what the bucket refilled since the server (and the bucket) started.
  auto refill = [&] {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return int64_t(std::ceil(s * double(kLimit) / 60.0)) + 1;
  };
  auto remaining = [](const HttpResult& r) { return std::atoll(r.header("x-ratelimit-remaining-tokens").c_str()); };
  const std::string once = R"("prompt":"Once upon a time","temperature":0)";

  // 1. Within the budget: 200, charged prompt + max_tokens from a full bucket.
  const HttpResult a = post("{" + once + R"(,"max_tokens":40,"ignore_eos":true})");
  ASSERT_EQ(a.status, 200) << a.body;
  const int64_t p = body_json(a)["usage"]["prompt_tokens"].get<int64_t>();
  ASSERT_GT(p, 0);
  EXPECT_EQ(body_json(a)["usage"]["completion_tokens"], 40);
  int64_t used = p + 40;
  EXPECT_EQ(a.header("x-ratelimit-limit-tokens"), "200");
  EXPECT_EQ(remaining(a), kLimit - used) << a.header("x-ratelimit-remaining-tokens");
  // Refilling what was taken from a full bucket: used * 60 s / limit.
  EXPECT_EQ(parse_reset_ms(a.header("x-ratelimit-reset-tokens")), used * 60000 / kLimit) << a.header("x-ratelimit-reset-tokens");
  EXPECT_EQ(a.header("x-ratelimit-limit-requests"), "");  // no requests/min limit on this key

  // 2. A stream is charged the same way and its headers say so.
  const HttpResult s = post("{" + once + R"(,"max_tokens":40,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.header("content-type"), "text/event-stream");
  const auto ev = sse_events(s.body);
  ASSERT_GE(ev.size(), 3u) << s.body;
  EXPECT_EQ(ev.back(), "data: [DONE]");
  const json su = json::parse(ev[ev.size() - 2].substr(6))["usage"];
  EXPECT_EQ(su["completion_tokens"], 40);
  used += su["prompt_tokens"].get<int64_t>() + 40;
  EXPECT_EQ(s.header("x-ratelimit-limit-tokens"), "200");
  EXPECT_GE(remaining(s), kLimit - used);
  EXPECT_LE(remaining(s), kLimit - used + refill());

  // 3. What a request does not generate is refunded: max_tokens 100 (all but what is
  // left), but a stop string ends it early; the next request's headers show the refund.
  const HttpResult early = post("{" + once + R"(,"max_tokens":100,"stop":["Lily"]})");
  ASSERT_EQ(early.status, 200) << early.body;
  const json eu = body_json(early)["usage"];
  ASSERT_EQ(body_json(early)["choices"][0]["finish_reason"], "stop");
  ASSERT_LT(eu["completion_tokens"].get<int64_t>(), 100);
  used += eu["prompt_tokens"].get<int64_t>() + eu["completion_tokens"].get<int64_t>();
  const HttpResult next = post("{" + once + R"(,"max_tokens":4,"ignore_eos":true})");
  ASSERT_EQ(next.status, 200) << next.body;
  used += p + 4;
  EXPECT_GE(remaining(next), kLimit - used) << "the unused tokens were not refunded";
  EXPECT_LE(remaining(next), kLimit - used + refill());

  // 4. Take all but 10 of what is certainly left...
  const int64_t drain = kLimit - used - p - 10;
  ASSERT_GT(drain, 0);
  const HttpResult d = post("{" + once + R"(,"max_tokens":)" + std::to_string(drain) + R"(,"ignore_eos":true})");
  ASSERT_EQ(d.status, 200) << d.body;
  used += p + drain;
  // ...then a request that fits a minute but not what is left (10 tokens, plus the refill
  // of a few seconds) is 429 with Retry-After and charges nothing, streamed or not.
  const std::string over_body = "{" + once + R"(,"max_tokens":120)";
  ASSERT_LT(kLimit - used + refill(), p + 120) << "the machine took too long for this check";
  for (const char* tail : {"}", R"(,"stream":true})"}) {
    const HttpResult over = post(over_body + tail);
    ASSERT_EQ(over.status, 429) << over.body;
    EXPECT_EQ(over.header("content-type"), "application/json") << tail;
    const json e = body_json(over)["error"];
    EXPECT_EQ(e["type"], "rate_limit_error");
    EXPECT_EQ(e["code"], "rate_limit_exceeded");
    const std::string msg = e["message"].get<std::string>();
    EXPECT_EQ(msg.rfind("rate limit reached: 200 tokens per minute (available ", 0), 0u) << msg;
    EXPECT_NE(msg.find("requested " + std::to_string(p + 120) + " = prompt + max_tokens); try again in "), std::string::npos) << msg;
    // Retry-After: until p + 120 are there, at most (p + 120 - (limit - used)) * 60 s / limit.
    const int retry = std::atoi(over.header("retry-after").c_str());
    EXPECT_GE(retry, 1) << over.header("retry-after");
    EXPECT_LE(retry, (p + 120 - (kLimit - used)) * 60 / kLimit + 1);
    EXPECT_EQ(over.header("x-ratelimit-limit-tokens"), "200");
    EXPECT_GE(remaining(over), kLimit - used);
    EXPECT_LE(remaining(over), kLimit - used + refill());
  }
  // The refusals charged nothing: a small request still fits in those 10.
  const HttpResult last = post(R"({"prompt":"Hi","max_tokens":1})");
  EXPECT_EQ(last.status, 200) << last.body;

  // 5. A request larger than a whole minute of the key can never run: the message says so.
  const HttpResult big = post("{" + once + R"(,"max_tokens":60})", "sk-tiny");
  ASSERT_EQ(big.status, 429) << big.body;
  EXPECT_EQ(body_json(big)["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(body_json(big)["error"]["message"],
            "the request needs " + std::to_string(p + 60) +
                " tokens (prompt + max_tokens), more than the key's 50 tokens per minute; lower max_tokens");
  EXPECT_EQ(big.header("retry-after"), "60");
  EXPECT_EQ(big.header("x-ratelimit-remaining-tokens"), "50");

  // 6. A key without a token limit has no token headers.
  const HttpResult free_key = post("{" + once + R"(,"max_tokens":100})", "sk-free");
  EXPECT_EQ(free_key.status, 200) << free_key.body;
  EXPECT_EQ(free_key.header("x-ratelimit-limit-tokens"), "");
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.stderr_text();
}

// ---------------------------------------------------------------------------------------
// Server E: http.max_connections 2. Two idle keep-alive connections hold both slots; a
// third connection gets 503 + Retry-After and is closed; the two are not disturbed; a
// slot is free again once a client goes (here: vanishes with a reset).

}  // namespace
}  // namespace ts
