// `tierserve gateway` with real processes on loopback: the gateway, tierserve workers it
// starts itself on two models, fake workers that hang or answer garbage, and llama.cpp's
// server built from the pinned source (bench/peer.sh --server-only). Checked:
//  - routing by name and by the router (rules, default), /v1/models, 404, streams through;
//  - pools: standard borrows the idle dedicated pool, a fast arrival is placed there at
//    once (not held behind the borrowed request);
//  - kill -9 of a worker under load: every request ends exactly once, complete or with an
//    explicit error, and client = gateway metrics = access log; the worker is restarted;
//  - a worker that hangs (keeps its socket, answers nothing) is out within about a second
//    and what was on it is placed again; garbage, non-OpenAI errors and a truncated stream
//    from a worker are explicit errors, counted, and the gateway lives;
//  - llama-server as a worker: completions and streams through, and the tier order
//    enforced by the gateway (llama.cpp has none);
//  - bad configs exit 2 naming the field.
#define TS_GATEWAY_TEST_DIR "gateway_test"
#include "testing/gateway.h"

namespace ts {
namespace {


// ---------------------------------------------------------------------------------------

TEST(Gateway, RoutesByNameAndByTheRouterAndStreamsThrough) {
  prepare();
  ServerProcess g(kWork, "routes");
  const std::string cfg = "workers:\n" + local_worker("story", "stories", kStories, "shared") +
                          local_worker("slow", "slow", kSlow, "shared", 1) + kHealth +
                          "router:\n  rules:\n    - {name: code, task: code, target: slow}\n"
                          "    - {name: long, min_prompt_tokens: 40, target: slow}\n  default: stories\n"
                          "  on_saturated: fallback\n  fallback: {slow: stories}\n";
  ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/routes.d"})) << g.stderr_text();
  ASSERT_TRUE(wait_up(g.port())) << g.stderr_text();
  // /v1/models: the union and the router's model.
  const json models = body_json(http(g.port(), "GET", "/v1/models"));
  std::set<std::string> ids;
  for (const auto& m : models["data"]) ids.insert(m["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{"stories", "slow", "auto"}));
  EXPECT_EQ(http(g.port(), "GET", "/v1/models/slow").status, 200);
  EXPECT_EQ(body_json(http(g.port(), "GET", "/v1/models/nope"))["error"]["code"], "model_not_found");
  // By name.
  HttpResult r = http(g.port(), "POST", "/v1/completions", completion("stories", "Once upon a time", 8, false));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-model-served"), "stories");
  EXPECT_EQ(r.header("x-tierserve-worker"), "story");
  EXPECT_EQ(r.header("x-tierserve-pool"), "shared");
  EXPECT_EQ(body_json(r)["model"], "stories");
  EXPECT_FALSE(r.header("x-request-id").empty());
  // By the router: a rule, then the default.
  r = http(g.port(), "POST", "/v1/chat/completions",
           json{{"model", "auto"}, {"messages", {{{"role", "user"}, {"content", "Write a Python function that sorts a list"}}}},
                {"max_tokens", 4}}
               .dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-model-served"), "slow");
  EXPECT_EQ(r.header("x-tierserve-route"), "rule:code");
  EXPECT_EQ(body_json(r)["model"], "slow");
  r = http(g.port(), "POST", "/v1/completions", completion("auto", "Once upon a time", 4, false));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-model-served"), "stories");
  EXPECT_EQ(r.header("x-tierserve-route"), "default");
  // Streamed through: chunks and [DONE], the proxy-friendly headers.
  r = http(g.port(), "POST", "/v1/completions", completion("stories", "Once upon a time", 16, true, "priority"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "text/event-stream");
  EXPECT_EQ(r.header("x-accel-buffering"), "no");
  EXPECT_EQ(r.header("x-tierserve-tier-requested"), "ultrafast");
  EXPECT_EQ(r.header("x-tierserve-tier-served"), "ultrafast");
  const auto ev = sse_events(r.body);
  ASSERT_GE(ev.size(), 3u) << r.body;
  EXPECT_EQ(ev.back(), "data: [DONE]");
  // Errors: an unknown model, bad JSON, a bad tier.
  r = http(g.port(), "POST", "/v1/completions", completion("nope", "x", 1, false));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(body_json(r)["error"]["code"], "model_not_found");
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", "{not json").status, 400);
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", completion("stories", "x", 1, false, "platinum")).status, 400);
  // The chosen model saturated (its one slot held by a long stream): the router's request
  // falls back to the other model, said as a degradation.
  {
    OpenRequest hold(g.port(), "POST", "/v1/completions", completion("slow", "Once upon a time", 2000, true, "", true));
    ASSERT_TRUE(hold.read_until("data: ")) << hold.raw();
    r = http(g.port(), "POST", "/v1/chat/completions",
             json{{"model", "auto"}, {"messages", {{{"role", "user"}, {"content", "Write a Python function that adds"}}}},
                  {"max_tokens", 4}}
                 .dump());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-tierserve-route"), "rule:code");
    EXPECT_EQ(r.header("x-tierserve-model-served"), "stories");
    EXPECT_EQ(r.header("x-tierserve-degraded-reason"), "model_fallback");
    EXPECT_EQ(body_json(r)["model"], "stories");
    hold.close();
  }
  // The decisions are counted.
  const std::string m = http(g.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric_sum(m, "tierserve_route_decisions_total{router=\"auto\",target=\"slow\",reason=\"rule\"}"), 2) << m;
  EXPECT_EQ(metric_sum(m, "tierserve_gateway_degradations_total{tier_requested=\"standard\",tier_served=\"standard\",reason=\"model_fallback\"}"), 1) << m;
  EXPECT_EQ(metric_sum(m, "tierserve_route_decisions_total{router=\"auto\",target=\"stories\",reason=\"default\"}"), 1);
  // SIGTERM: the gateway drains and stops its workers.
  const json s = stats(g.port());
  std::vector<int> pids;
  for (const auto& w : s["workers"]) pids.push_back(w["pid"].get<int>());
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
  for (int pid : pids) EXPECT_NE(::kill(pid, 0), 0) << "worker " << pid << " outlived the gateway";
}

TEST(Gateway, StandardBorrowsTheIdleDedicatedPoolAndAFastArrivalIsNotHeldBehindIt) {
  prepare();
  ServerProcess g(kWork, "pools");
  const std::string cfg = "workers:\n" + local_worker("ded", "slow", kSlow, "dedicated", 1) +
                          local_worker("sh", "slow", kSlow, "shared", 1) + kHealth;
  ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/pools.d"})) << g.stderr_text();
  ASSERT_TRUE(wait_up(g.port())) << g.stderr_text();
  // Two long standard streams: the shared slot, then the idle dedicated pool (borrowed).
  OpenRequest a(g.port(), "POST", "/v1/completions", completion("slow", "Once upon a time", 2000, true, "default", true));
  ASSERT_TRUE(a.read_until("data: ")) << a.raw();
  OpenRequest b(g.port(), "POST", "/v1/completions", completion("slow", "Once upon a time", 2000, true, "default", true));
  ASSERT_TRUE(b.read_until("data: ")) << b.raw();
  EXPECT_NE(a.raw().find("x-tierserve-pool: shared"), std::string::npos) << a.raw().substr(0, 600);
  EXPECT_NE(b.raw().find("x-tierserve-pool: dedicated"), std::string::npos) << b.raw().substr(0, 600);
  EXPECT_NE(b.raw().find("x-tierserve-pool-reason: borrowed"), std::string::npos) << b.raw().substr(0, 600);
  // A fast request goes to the dedicated worker at once, beside the borrowed stream, and
  // that worker's scheduler serves it on ultrafast.
  const auto t0 = std::chrono::steady_clock::now();
  const HttpResult f = http(g.port(), "POST", "/v1/completions", completion("slow", "Hello", 4, false, "priority"));
  const double fast_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(f.status, 200) << f.body;
  EXPECT_EQ(f.header("x-tierserve-pool"), "dedicated");
  EXPECT_EQ(f.header("x-tierserve-pool-reason"), "");
  EXPECT_EQ(f.header("x-tierserve-tier-served"), "ultrafast");
  EXPECT_LE(body_json(f)["tierserve"]["queue_ms"].get<double>(), 1000.0);
  // A third standard request waits: the shared slot is taken and the dedicated worker's one
  // slot is borrowed already (the fast request went beside it, not counted against it).
  OpenRequest c(g.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false, "default"));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const json s = stats(g.port());
  EXPECT_EQ(s["queued"]["standard"].get<int>(), 1) << s.dump();
  a.close();  // the shared slot frees: the waiting request is placed there
  const HttpResult cr = c.finish();
  EXPECT_EQ(cr.status, 200) << cr.body;
  b.close();
  const std::string m = http(g.port(), "GET", "/metrics").body;
  EXPECT_GE(metric_sum(m, "tierserve_gateway_placements_total{tier=\"standard\",pool=\"dedicated\",how=\"borrowed\"}"), 1) << m;
  std::printf("[gateway] fast request beside a borrowed stream: %.0f ms end to end\n", fast_ms);
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
}

// One request's terminal outcome, as the client saw it.
struct Outcome {
  int status = 0;
  bool complete = false;      // 200 with a whole body or [DONE]
  bool explicit_error = false;  // an OpenAI error object (body or in-stream) with a code
  std::string code;
  std::string request_id;       // x-request-id: its access-log line is found by it
};

Outcome classify(const HttpResult& r, bool stream) {
  Outcome o;
  o.status = r.status;
  o.request_id = r.header("x-request-id");
  if (r.status == 0) return o;
  if (r.status != 200) {
    const json j = body_json(r);
    o.explicit_error = j.is_object() && j.contains("error") && j["error"]["code"].is_string();
    if (o.explicit_error) o.code = j["error"]["code"].get<std::string>();
    return o;
  }
  if (!stream) {
    const json j = body_json(r);
    o.complete = j.is_object() && j.contains("choices");
    return o;
  }
  const auto ev = sse_events(r.body);
  const bool done = !ev.empty() && ev.back() == "data: [DONE]";
  for (const auto& e : ev)
    if (e.rfind("data: {\"error\"", 0) == 0) {
      o.explicit_error = done;
      o.code = json::parse(e.substr(6))["error"]["code"].get<std::string>();
      return o;
    }
  o.complete = done;
  return o;
}

TEST(Gateway, KillNineUnderLoadLosesNothingAndTheWorkerComesBack) {
  prepare();
  ServerProcess g(kWork, "kill9");
  const std::string cfg = "workers:\n" + local_worker("w1", "slow", kSlow, "shared", 3) +
                          local_worker("w2", "slow", kSlow, "shared", 3) + kHealth;
  ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/kill9.d"})) << g.stderr_text();
  ASSERT_TRUE(wait_up(g.port())) << g.stderr_text();
  const json s0 = stats(g.port());
  int victim = 0;
  for (const auto& w : s0["workers"])
    if (w["name"] == "w1") victim = w["pid"].get<int>();
  ASSERT_GT(victim, 0);
  constexpr int kClients = 6, kPerClient = 6;
  std::mutex mu;
  std::vector<Outcome> outcomes;
  std::atomic<int> started{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < kPerClient; ++i) {
        const bool stream = (c + i) % 2 == 0;
        ++started;
        const HttpResult r = http(g.port(), "POST", "/v1/completions", completion("slow", "Once upon a time", 48, stream, "", true));
        std::lock_guard<std::mutex> lk(mu);
        outcomes.push_back(classify(r, stream));
      }
    });
  while (started.load() < kClients * 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  for (auto& t : clients) t.join();
  // The ledger: one terminal outcome per request, each complete or an explicit error.
  ASSERT_EQ(outcomes.size(), size_t(kClients * kPerClient));
  int ok = 0, errors = 0;
  std::map<std::string, int> codes;
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.complete || o.explicit_error) << "status " << o.status << " with neither a whole answer nor an error";
    ok += o.complete;
    errors += o.explicit_error;
    if (o.explicit_error) ++codes[o.code];
  }
  EXPECT_EQ(ok + errors, kClients * kPerClient);
  for (const auto& [code, n] : codes) EXPECT_EQ(code, "worker_error") << n;
  EXPECT_GT(ok, kClients * kPerClient / 2);
  // The gateway's counters and its access log agree with the client. The exchange is
  // counted when it ends, just after its last byte went to the socket, so a client can hold
  // its answer a moment before the count moves: wait (bounded) for the totals to settle.
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = http(g.port(), "GET", "/metrics").body;
    if (metric_sum(m, "tierserve_gateway_requests_total{") >= kClients * kPerClient) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric_sum(m, "tierserve_gateway_requests_total{"), kClients * kPerClient) << m;
  EXPECT_EQ(metric_sum(m, "tierserve_gateway_requests_total{tier=\"standard\",model=\"slow\",version=\"\",outcome=\"ok\"}"), ok);
  std::string err = g.stderr_text();
  int access = 0;
  for (size_t p = 0; (p = err.find(" access request_id=", p)) != std::string::npos; ++p)
    access += err.compare(err.find("route=", p), 28, "route=\"POST /v1/completions\"") == 0;
  EXPECT_EQ(access, kClients * kPerClient) << err.substr(0, 2000);
  // Request by request: each client outcome has its one access line, with the status the
  // client saw and, for an error, the code it was told.
  for (const auto& o : outcomes) {
    ASSERT_FALSE(o.request_id.empty());
    const size_t at = err.find(" request_id=" + o.request_id + " ");
    ASSERT_NE(at, std::string::npos) << o.request_id;
    EXPECT_EQ(err.find(" request_id=" + o.request_id + " ", at + 1), std::string::npos) << "two lines for " << o.request_id;
    const std::string line = err.substr(at, err.find('\n', at) - at);
    EXPECT_NE(line.find(" status=" + std::to_string(o.status) + " "), std::string::npos) << line;
    if (o.explicit_error) EXPECT_NE(line.find(" error=" + o.code), std::string::npos) << line;
    else EXPECT_EQ(line.find(" error="), std::string::npos) << line;
  }
  // Each worker's load as read from its /metrics is in the stats.
  EXPECT_TRUE(s0["workers"][0]["load"].contains("kv_usage")) << s0.dump();
  // The worker is restarted and serves again.
  ASSERT_TRUE(wait_up(g.port(), {"w1"}, 60000)) << g.stderr_text();
  const json s1 = stats(g.port());
  for (const auto& w : s1["workers"])
    if (w["name"] == "w1") {
      EXPECT_GE(w["restarts"].get<int>(), 1);
      EXPECT_NE(w["pid"].get<int>(), victim);
    }
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", completion("slow", "Once", 2, false)).status, 200);
  std::printf("[gateway] kill -9 under load: %d complete, %d explicit errors (%s), %.0f retries\n", ok, errors,
              codes.empty() ? "none" : "worker_error", metric_sum(m, "tierserve_gateway_retries_total{"));
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
}

TEST(Gateway, AHungWorkerIsRoutedAroundAndGarbageIsAnExplicitError) {
  prepare();
  FakeWorker flaky, junk;
  ServerProcess g(kWork, "hung");
  const std::string cfg = "workers:\n" + local_worker("real", "stories", kStories, "shared", 4) +
                          "  - {name: flaky, kind: tierserve, model: stories, url: 'http://127.0.0.1:" +
                          std::to_string(flaky.port()) + "', pool: shared, max_inflight: 64}\n"
                          "  - {name: junk, kind: tierserve, model: junk, url: 'http://127.0.0.1:" +
                          std::to_string(junk.port()) + "', pool: shared}\n" + kHealth;
  ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/hung.d"})) << g.stderr_text();
  ASSERT_TRUE(wait_up(g.port())) << g.stderr_text();
  // The flaky worker answers (its canned text) while it is well...
  int from_fake = 0;
  for (int i = 0; i < 6; ++i) {
    const HttpResult r = http(g.port(), "POST", "/v1/completions", completion("stories", "Once", 4, false));
    ASSERT_EQ(r.status, 200) << r.body;
    from_fake += r.header("x-tierserve-worker") == "flaky";
  }
  EXPECT_GT(from_fake, 0);
  // ...then hangs: it keeps its socket and answers nothing, not even its health check.
  flaky.hang(true);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  std::vector<HttpResult> rs(8);
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] { rs[size_t(i)] = http(g.port(), "POST", "/v1/completions", completion("stories", "Once", 4, false)); });
  // Out of the fleet within about a second (health checks every 100 ms, 400 ms to answer).
  bool down = false;
  double down_ms = 0;
  while (!down && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
    const json st = stats(g.port());  // kept: a range-for over a temporary's member dangles
    for (const auto& w : st["workers"])
      if (w["name"] == "flaky" && !w["up"].get<bool>()) down = true;
    down_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!down) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(down) << stats(g.port()).dump();
  EXPECT_LT(down_ms, 1500);
  for (auto& t : ts) t.join();
  for (const auto& r : rs) {  // all answered, those placed on the hung worker placed again
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-tierserve-worker"), "real") << r.body;
  }
  // A draining worker (its readiness answers 503) leaves the fleet as fast, and comes back
  // when it is ready again.
  auto junk_up = [&] {
    const json st = stats(g.port());
    for (const auto& w : st["workers"])
      if (w["name"] == "junk") return w["up"].get<bool>();
    return false;
  };
  junk.drain(true);
  const auto t1 = std::chrono::steady_clock::now();
  while (junk_up() && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double drain_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_FALSE(junk_up()) << stats(g.port()).dump();
  EXPECT_LT(drain_ms, 1500);
  std::printf("[gateway] draining worker out after %.0f ms\n", drain_ms);
  junk.drain(false);
  ASSERT_TRUE(wait_up(g.port(), {"junk"}, 5000)) << stats(g.port()).dump();
  // Garbage from a worker: explicit errors, counted, and the gateway lives.
  HttpResult r = http(g.port(), "POST", "/v1/completions", completion("junk", "garbage200", 4, false));
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(body_json(r)["error"]["code"], "worker_error") << r.body;
  r = http(g.port(), "POST", "/v1/completions", completion("junk", "html500", 4, false));
  EXPECT_EQ(r.status, 502);
  EXPECT_EQ(body_json(r)["error"]["code"], "worker_error") << r.body;
  r = http(g.port(), "POST", "/v1/completions", completion("junk", "cut", 4, true));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto ev = sse_events(r.body);
  ASSERT_GE(ev.size(), 3u) << r.body;
  EXPECT_EQ(ev[0].rfind("data: {\"id\"", 0), 0u);
  EXPECT_EQ(json::parse(ev[ev.size() - 2].substr(6))["error"]["code"], "worker_error") << r.body;
  EXPECT_EQ(ev.back(), "data: [DONE]");
  const std::string m = http(g.port(), "GET", "/metrics").body;
  EXPECT_GE(metric_sum(m, "tierserve_gateway_worker_errors_total{worker=\"junk\""), 3) << m;
  EXPECT_GE(metric_sum(m, "tierserve_gateway_worker_errors_total{worker=\"flaky\""), 0);
  std::printf("[gateway] hung worker out after %.0f ms\n", down_ms);
  EXPECT_EQ(http(g.port(), "GET", "/health/ready").status, 200);
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
}

// What each worker kind is sent: tierserve the tier as service_tier, vLLM as priority (its
// order: lower first), llama.cpp neither (the gateway keeps the order); the model name the
// worker answers to (upstream_model) and the client's back in the response. And a key's
// limits apply once, at the gateway.
TEST(Gateway, EachWorkerKindGetsTheTierInItsTermsAndKeysAreLimitedOnce) {
  prepare();
  FakeWorker vllm, llama, ts;
  ServerProcess g(kWork, "kinds");
  auto url = [](const FakeWorker& f) { return "'http://127.0.0.1:" + std::to_string(f.port()) + "'"; };
  // The key "sk-gw-test": sha256 below; two requests a minute.
  const std::string cfg =
      "workers:\n"
      "  - {name: v, kind: vllm, model: big, upstream_model: meta/llama-big, url: " + url(vllm) + "}\n"
      "  - {name: l, kind: llama.cpp, model: small, url: " + url(llama) + "}\n"
      "  - {name: t, kind: tierserve, model: mid, url: " + url(ts) + "}\n" + kHealth +
      "keys:\n  - {name: k, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-gw-test", kWork) + ", requests_per_min: 3}\n"
      "  - {name: std, sha256: " + hash_key(TS_TIERSERVE_BIN, "sk-gw-std", kWork) + ", tiers: [standard, batch]}\n";
  ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/kinds.d"})) << g.stderr_text();
  const HeaderList auth = {{"Authorization", "Bearer sk-gw-test"}};
  ASSERT_TRUE(wait_up(g.port(), {}, 60000, auth)) << g.stderr_text();
  HttpResult r = http(g.port(), "POST", "/v1/completions", completion("big", "Once", 4, false, "flex"), auth);
  ASSERT_EQ(r.status, 200) << r.body;
  json sent = json::parse(vllm.last_body());
  EXPECT_EQ(sent["priority"], 2) << sent.dump();  // batch: the third tier
  EXPECT_FALSE(sent.contains("service_tier"));
  EXPECT_EQ(sent["model"], "meta/llama-big");
  EXPECT_EQ(body_json(r)["model"], "big");  // the fake answers "stories": the client's name put back
  r = http(g.port(), "POST", "/v1/completions", completion("small", "Once", 4, false, "priority"), auth);
  ASSERT_EQ(r.status, 200) << r.body;
  sent = json::parse(llama.last_body());
  EXPECT_FALSE(sent.contains("priority"));
  EXPECT_FALSE(sent.contains("service_tier"));
  EXPECT_EQ(sent["model"], "small");
  r = http(g.port(), "POST", "/v1/completions", completion("mid", "Once", 4, false, "priority"), auth);
  ASSERT_EQ(r.status, 200) << r.body;
  sent = json::parse(ts.last_body());
  EXPECT_EQ(sent["service_tier"], "ultrafast");
  EXPECT_FALSE(sent.contains("priority"));
  // The fourth request of the minute is refused here, before any worker sees it.
  const int before = vllm.completions() + llama.completions() + ts.completions();
  r = http(g.port(), "POST", "/v1/completions", completion("mid", "Once", 4, false), auth);
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(body_json(r)["error"]["code"], "rate_limit_exceeded") << r.body;
  EXPECT_EQ(vllm.completions() + llama.completions() + ts.completions(), before);
  EXPECT_EQ(http(g.port(), "POST", "/v1/completions", completion("mid", "Once", 4, false)).status, 401);
  // A key without the fast tier asking for it: served on standard, said.
  r = http(g.port(), "POST", "/v1/completions", completion("mid", "Once", 4, false, "priority"), {{"Authorization", "Bearer sk-gw-std"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-tier-requested"), "ultrafast");
  EXPECT_EQ(r.header("x-tierserve-tier-served"), "standard");
  EXPECT_EQ(r.header("x-tierserve-degraded-reason"), "not_entitled");
  EXPECT_EQ(json::parse(ts.last_body())["service_tier"], "standard");
  // A body priority (the Inference Extension's: higher = more urgent) names the tier when
  // service_tier does not; the worker is told the tier, not the priority.
  const HeaderList std_key = {{"Authorization", "Bearer sk-gw-std"}};
  r = http(g.port(), "POST", "/v1/completions", R"({"model":"mid","prompt":"Once","max_tokens":4,"priority":-10})", std_key);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-tier-served"), "batch");
  sent = json::parse(ts.last_body());
  EXPECT_EQ(sent["service_tier"], "batch") << sent.dump();
  EXPECT_FALSE(sent.contains("priority"));
  // A valid W3C traceparent goes on to the worker; a malformed one does not.
  const std::string tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  for (const std::string& given : {tp, std::string("00-zz-01"), std::string("00-") + std::string(32, '0') + "-00f067aa0ba902b7-01"}) {
    HeaderList h = std_key;
    h.emplace_back("traceparent", given);
    r = http(g.port(), "POST", "/v1/completions", completion("mid", "Once", 4, false), h);
    ASSERT_EQ(r.status, 200) << r.body;
    if (given == tp) EXPECT_NE(ts.last_head().find("traceparent: " + tp + "\r\n"), std::string::npos) << ts.last_head();
    else EXPECT_EQ(ts.last_head().find("traceparent"), std::string::npos) << given << ":\n" << ts.last_head();
  }
  const int seen = ts.completions();
  r = http(g.port(), "POST", "/v1/completions", R"({"model":"mid","prompt":"Once","priority":"high"})", std_key);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(body_json(r)["error"]["param"], "priority") << r.body;
  EXPECT_EQ(ts.completions(), seen);
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
}

// llama.cpp's server, built from the pinned llama-cpp-python sdist (bench/peer.sh
// --server-only). Required where TIERSERVE_REQUIRE_LLAMA_SERVER=1 (CI).
std::string llama_server_bin() {
  if (const char* e = std::getenv("TIERSERVE_LLAMA_SERVER"); e && *e) return e;
  return std::string(TS_SOURCE_DIR) + "/build/peer/gcc/bin/llama-server";
}

TEST(Gateway, LlamaServerAsAWorkerWithTheTierOrderKeptByTheGateway) {
  prepare();
  const std::string bin = llama_server_bin();
  if (!std::ifstream(bin)) {
    const char* req = std::getenv("TIERSERVE_REQUIRE_LLAMA_SERVER");
    if (req && std::string(req) == "1") FAIL() << "no llama-server at " << bin << " (bash bench/peer.sh --server-only)";
    GTEST_SKIP() << "no llama-server at " << bin << " (bash bench/peer.sh --server-only builds it)";
  }
  // Two llama-servers: the tiny model (completions and streams through), and a slower one
  // with one slot for the tier order.
  struct Kill {
    pid_t p;
    ~Kill() {
      ::kill(p, SIGTERM);
      int st;
      ::waitpid(p, &st, 0);
    }
  };
  const int lport = free_port();
  Kill k1{testing_proc::spawn({bin, "-m", kStories, "--host", "127.0.0.1", "--port", std::to_string(lport), "-t", "1",
                               "--parallel", "1", "-c", "512", "--alias", "peer", "--metrics", "--no-webui"},
                              kWork + "/llama-server.out", kWork + "/llama-server.err")};
  const int sport = free_port();
  Kill k2{testing_proc::spawn({bin, "-m", kSlow, "--host", "127.0.0.1", "--port", std::to_string(sport), "-t", "1",
                               "--parallel", "1", "-c", "2048", "--alias", "slow", "--metrics", "--no-webui"},
                              kWork + "/llama-server-slow.out", kWork + "/llama-server-slow.err")};
  ServerProcess g(kWork, "llama");
  const std::string cfg = "workers:\n  - {name: llama, kind: llama.cpp, model: peer, url: 'http://127.0.0.1:" + std::to_string(lport) +
                          "', max_inflight: 1}\n  - {name: llama-slow, kind: llama.cpp, model: slow, url: 'http://127.0.0.1:" +
                          std::to_string(sport) + "', max_inflight: 1}\n" + kHealth;
  ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg, {"--work-dir", kWork + "/llama.d"})) << g.stderr_text();
  ASSERT_TRUE(wait_up(g.port(), {}, 60000)) << g.stderr_text() << testing_proc::slurp(kWork + "/llama-server.err");
  HttpResult r = http(g.port(), "POST", "/v1/completions", completion("peer", "Once upon a time", 16, false));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-tierserve-worker"), "llama");
  const json j = body_json(r);
  ASSERT_TRUE(j.contains("choices")) << r.body;
  EXPECT_FALSE(j["choices"][0]["text"].get<std::string>().empty());
  r = http(g.port(), "POST", "/v1/chat/completions",
           json{{"model", "peer"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 8}, {"stream", true}}.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(sse_events(r.body).back(), "data: [DONE]") << r.body;
  // Tier order: one slot; a long batch request runs (the slower model), then a standard and
  // an ultrafast one arrive and wait in the gateway; when the slot frees, the gateway places
  // the ultrafast one first.
  OpenRequest batch(g.port(), "POST", "/v1/completions", completion("slow", "Once upon a time", 1500, true, "flex", true));
  ASSERT_TRUE(batch.read_until("data: ")) << batch.raw();
  std::atomic<int> order{0};
  int std_at = -1, fast_at = -1;
  std::thread st([&] {
    const HttpResult x = http(g.port(), "POST", "/v1/completions", completion("slow", "Once", 4, false, "default"));
    EXPECT_EQ(x.status, 200) << x.body;
    std_at = order++;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread ft([&] {
    const HttpResult x = http(g.port(), "POST", "/v1/completions", completion("slow", "Once", 4, false, "priority"));
    EXPECT_EQ(x.status, 200) << x.body;
    EXPECT_EQ(x.header("x-tierserve-tier-served"), "ultrafast");
    fast_at = order++;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const json waiting = stats(g.port());
  EXPECT_EQ(waiting["queued"]["standard"], 1) << waiting.dump();
  EXPECT_EQ(waiting["queued"]["ultrafast"], 1) << waiting.dump();
  batch.close();  // the slot frees
  ft.join();
  st.join();
  const std::string m = http(g.port(), "GET", "/metrics").body;
  EXPECT_LT(fast_at, std_at) << "the ultrafast request was not placed before the standard one; retries "
                             << metric_sum(m, "tierserve_gateway_retries_total{") << ", worker errors "
                             << metric_sum(m, "tierserve_gateway_worker_errors_total{");
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
}

TEST(Gateway, BadConfigsExitTwoNamingTheField) {
  prepare();
  struct Case {
    std::string yaml, want;
  } cases[] = {
      {"workers:\n  - {name: a, kind: docker, model: m, url: 'http://h:1'}\n", "workers[0].kind"},
      {"workers:\n  - {name: a, kind: tierserve, model: m, url: 'ftp://h:1'}\n", "workers[0].url"},
      {"workers:\n" + local_worker("a", "m", kStories, "shared") + "tiers:\n  - {name: standard, pools: [shared, gold]}\n",
       "unknown pool 'gold'"},
      {"workers:\n" + local_worker("a", "m", kStories, "shared") + local_worker("a", "n", kStories, "shared"), "workers[1].name"},
      {"workers:\n" + local_worker("a", "m", kStories, "shared") + "router:\n  rules:\n    - {target: other}\n",
       "router.rules[0].target"},
  };
  int i = 0;
  for (const auto& c : cases) {
    ServerProcess g(kWork, "badcfg" + std::to_string(i++));
    EXPECT_FALSE(g.start_command(TS_TIERSERVE_BIN, "gateway", c.yaml, {}, 10));
    EXPECT_EQ(g.exit_code(), 2);
    EXPECT_NE(g.stderr_text().find(c.want), std::string::npos) << g.stderr_text();
  }
}

}  // namespace
}  // namespace ts
