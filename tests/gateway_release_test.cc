// Model releases through `tierserve gateway` with real workers on loopback: versions of
// one served model on two models (a 90/10 split within binomial tolerance, live weights, a
// rollback while a canary stream finishes where it is, sticky conversations, the load
// tester pinning versions) and the canary gated on per-tier SLOs (a slower canary rolled
// back by itself, an equal one ramped and promoted).
#define TS_GATEWAY_TEST_DIR "gateway_release_test"
#include "testing/gateway.h"

namespace ts {
namespace {

// Two real workers on different models as two versions of one served model: a 90/10 split
// lands within binomial tolerance over 500 requests, said in x-tierserve-model-version,
// the access log and the requests metric; the split changes live; a rollback sends all
// traffic to the stable version at once while a request in flight on the canary finishes
// there; bad changes are refused and traffic keeps its split; the event log has each
// change. A second gateway keeps each conversation on one version.
TEST(Gateway, VersionsSplitLiveAndRollBackAtOnce) {
  prepare();
  ServerProcess w1(kWork, "v1-worker"), w2(kWork, "v2-worker");
  ASSERT_TRUE(w1.start_command(TS_TIERSERVE_BIN, "serve", "model: {path: '" + kStories + "', threads: 1, served_name: chat}\n", {}))
      << w1.stderr_text();
  ASSERT_TRUE(w2.start_command(TS_TIERSERVE_BIN, "serve", "model: {path: '" + kSlow + "', threads: 1, served_name: chat}\n", {}))
      << w2.stderr_text();
  auto cfg = [&](const std::string& release) {
    return "workers:\n  - {name: stable, kind: tierserve, model: chat, version: v1, url: 'http://127.0.0.1:" +
           std::to_string(w1.port()) + "'}\n  - {name: canary, kind: tierserve, model: chat, version: v2, url: 'http://127.0.0.1:" +
           std::to_string(w2.port()) + "'}\n" + kHealth + "models:\n  chat: " + release + "\n";
  };
  ServerProcess g(kWork, "versions");
  ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg("{versions: {v1: 90, v2: 10}, stable: v1}"),
                              {"--work-dir", kWork + "/versions.d"}))
      << g.stderr_text();
  ASSERT_TRUE(wait_up(g.port(), {"chat"})) << g.stderr_text();
  // Both workers up before counting (the split is over versions that can serve).
  for (int i = 0; i < 200 && metric_sum(http(g.port(), "GET", "/metrics").body, "tierserve_gateway_worker_up{") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto versions_of = [&](int n) {
    std::map<std::string, int> seen;
    for (int i = 0; i < n; ++i) {
      const HttpResult r = http(g.port(), "POST", "/v1/completions", completion("chat", "Once", 1, false));
      EXPECT_EQ(r.status, 200) << r.body;
      ++seen[r.header("x-tierserve-model-version")];
    }
    return seen;
  };
  auto seen = versions_of(500);
  // sd = sqrt(500 * 0.1 * 0.9) = 6.7: within 4 of them.
  EXPECT_EQ(seen["v1"] + seen["v2"], 500);
  EXPECT_NEAR(seen["v2"], 50, 27) << seen["v1"] << "/" << seen["v2"];
  std::string m = http(g.port(), "GET", "/metrics").body;
  EXPECT_EQ(metric_sum(m, "tierserve_gateway_requests_total{tier=\"standard\",model=\"chat\",version=\"v2\",outcome=\"ok\"}"), seen["v2"]) << m;
  EXPECT_NE(g.stderr_text().find("model_version=v2"), std::string::npos);
  // The load tester pins each side to a version (x-tierserve-model-version) and compares
  // them per tier; a version the model does not have is a 400.
  {
    const std::string out = kWork + "/versions-bench.json";
    ::unlink(out.c_str());
    const std::string cmd = std::string(TS_TIERSERVE_BIN) + " bench --url http://127.0.0.1:" + std::to_string(g.port()) +
                            " --model chat --model-version v1 --compare-version v2 --mode closed -c 2 -n 20 --compare-rounds 2"
                            " --input-len 4 --output-len 4 --no-cold-start --warmup 0 --tier-mix standard=1 -q --json '" + out +
                            "' > /dev/null 2>&1";
    const double v1_before = metric_sum(http(g.port(), "GET", "/metrics").body, "tierserve_gateway_requests_total{tier=\"standard\",model=\"chat\",version=\"v1\"");
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    const json b = json::parse(slurp(out), nullptr, false);
    ASSERT_TRUE(b.contains("compare")) << slurp(out).substr(0, 500);
    EXPECT_EQ(b["compare"]["a"]["label"], "v1");
    EXPECT_EQ(b["compare"]["b"]["label"], "v2");
    EXPECT_TRUE(b["compare"]["ratio_b_over_a_by_tier"].contains("standard")) << b["compare"].dump();
    EXPECT_GT(b["compare"]["ratio_b_over_a_by_tier"]["standard"]["ttft_p50"].get<double>(), 0);
    const double v1_after = metric_sum(http(g.port(), "GET", "/metrics").body, "tierserve_gateway_requests_total{tier=\"standard\",model=\"chat\",version=\"v1\"");
    EXPECT_EQ(v1_after - v1_before, 20);  // pinned: none of the v1 side's requests went to v2, nor v2's to v1
    HttpResult p = http(g.port(), "POST", "/v1/completions", completion("chat", "Once", 1, false), {{"x-tierserve-model-version", "v9"}});
    EXPECT_EQ(p.status, 400);
    EXPECT_EQ(body_json(p)["error"]["code"], "unknown_version") << p.body;
  }
  // Live: everything to the canary.
  HttpResult r = http(g.port(), "POST", "/admin/models/chat/weights", R"({"weights":{"v1":0,"v2":100}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body_json(r)["versions"]["v2"]["share"], 1.0);
  EXPECT_EQ(versions_of(20)["v2"], 20);
  // A request in flight on the canary when the rollback comes finishes there.
  OpenRequest held(g.port(), "POST", "/v1/completions", completion("chat", "Once upon a time", 300, true, "", true));
  ASSERT_TRUE(held.read_until("data: ")) << held.raw();
  EXPECT_NE(held.raw().find("x-tierserve-model-version: v2"), std::string::npos) << held.raw().substr(0, 600);
  r = http(g.port(), "POST", "/admin/models/chat/rollback", "");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body_json(r)["versions"]["v1"]["share"], 1.0);
  EXPECT_EQ(versions_of(20)["v1"], 20);
  EXPECT_TRUE(held.read_until("data: [DONE]")) << held.raw().substr(held.raw().size() > 400 ? held.raw().size() - 400 : 0);
  EXPECT_EQ(held.raw().find("\"error\""), std::string::npos);
  // Bad changes: refused, named, and the split stays.
  const std::pair<const char*, const char*> bad[] = {
      {R"({"weights":{"v1":0,"v2":0}})", "invalid_weight"}, {R"({"weights":{"v3":1}})", "unknown_version"},
      {R"({"weights":{"v1":-5}})", "invalid_weight"},      {"not json", "invalid_json"}};
  for (const auto& [body, code] : bad) {
    r = http(g.port(), "POST", "/admin/models/chat/weights", body);
    EXPECT_EQ(r.status, 400) << body << " " << r.body;
    EXPECT_EQ(body_json(r)["error"]["code"], code) << r.body;
  }
  EXPECT_EQ(http(g.port(), "POST", "/admin/models/nope/rollback", "").status, 404);
  EXPECT_EQ(versions_of(20)["v1"], 20);
  r = http(g.port(), "GET", "/admin/models/chat/events");
  ASSERT_EQ(r.status, 200) << r.body;
  const json ev = body_json(r)["events"];
  ASSERT_EQ(ev.size(), 2u) << r.body;
  EXPECT_EQ(ev[0]["event"], "weights");
  EXPECT_EQ(ev[1]["event"], "rollback");
  EXPECT_EQ(ev[1]["to"], "v1");
  r = http(g.port(), "GET", "/admin/models/chat");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body_json(r)["stable"], "v1");
  EXPECT_EQ(body_json(r)["versions"]["v2"]["workers"], json::array({"canary"}));
  EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();

  // Sticky per conversation (the header, else its opening messages): 50/50, each of 20
  // conversations stays on one version over its turns, and both versions get some.
  ServerProcess s(kWork, "versions-sticky");
  ASSERT_TRUE(s.start_command(TS_TIERSERVE_BIN, "gateway", cfg("{versions: {v1: 1, v2: 1}, stable: v1, sticky: conversation}"),
                              {"--work-dir", kWork + "/versions-sticky.d"}))
      << s.stderr_text();
  ASSERT_TRUE(wait_up(s.port(), {"chat"})) << s.stderr_text();
  for (int i = 0; i < 200 && metric_sum(http(s.port(), "GET", "/metrics").body, "tierserve_gateway_worker_up{") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::set<std::string> both;
  for (int c = 0; c < 20; ++c) {
    std::set<std::string> mine;
    for (int turn = 0; turn < 4; ++turn) {
      const json body = {{"model", "chat"},
                         {"max_tokens", 1},
                         {"messages", json::array({{{"role", "user"}, {"content", "conversation " + std::to_string(c)}},
                                                   {{"role", "assistant"}, {"content", "turn " + std::to_string(turn)}},
                                                   {{"role", "user"}, {"content", "and then?"}}})}};
      const HttpResult t = http(s.port(), "POST", "/v1/chat/completions", body.dump());
      ASSERT_EQ(t.status, 200) << t.body;
      mine.insert(t.header("x-tierserve-model-version"));
    }
    EXPECT_EQ(mine.size(), 1u) << "conversation " << c;
    both.insert(mine.begin(), mine.end());
  }
  EXPECT_EQ(both.size(), 2u);
  EXPECT_EQ(s.stop(SIGTERM), 0) << s.stderr_text();
}

// A canary gated on per-tier SLOs, end to end: a slower canary (a bigger model) is rolled
// back automatically within a few of its windows and everything returns to the stable
// version; a canary as good as the stable one ramps through its steps and is promoted.
TEST(Gateway, CanaryRolledBackWhenSlowerPromotedWhenNot) {
  prepare();
  ServerProcess fast(kWork, "canary-fast"), fast2(kWork, "canary-fast2"), slow(kWork, "canary-slow");
  ASSERT_TRUE(fast.start_command(TS_TIERSERVE_BIN, "serve", "model: {path: '" + kStories + "', threads: 1, served_name: chat}\n", {}));
  ASSERT_TRUE(fast2.start_command(TS_TIERSERVE_BIN, "serve", "model: {path: '" + kStories + "', threads: 1, served_name: chat}\n", {}));
  ASSERT_TRUE(slow.start_command(TS_TIERSERVE_BIN, "serve", "model: {path: '" + kSlow + "', threads: 1, served_name: chat}\n", {}));
  auto cfg = [&](const ServerProcess& canary, const std::string& thresholds) {
    return "workers:\n  - {name: stable, kind: tierserve, model: chat, version: v1, url: 'http://127.0.0.1:" +
           std::to_string(fast.port()) + "'}\n  - {name: canary, kind: tierserve, model: chat, version: v2, url: 'http://127.0.0.1:" +
           std::to_string(canary.port()) + "'}\n" + kHealth +
           "models:\n  chat:\n    versions: {v1: 1, v2: 0}\n    stable: v1\n"
           "    canary: {version: v2, steps: [50, 100], window_ms: 1500, interval_ms: 200, min_requests: 10,\n"
           "             thresholds: " + thresholds + "}\n";
  };
  // A prompt of ~60 tokens: the bigger model's prefill, not the fixed costs both workers
  // share (and which other tests running beside this one inflate), decides its TTFT.
  const std::string prompt =
      "Once upon a time there was a little girl named Lily who lived in a small house near the woods with her mother, "
      "her father and a big brown dog that liked to run after the birds in the garden every morning";
  auto drive = [&](int port, const std::string& until_state, int max_ms) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string state;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(max_ms)) {
      for (int i = 0; i < 5; ++i) EXPECT_EQ(http(port, "POST", "/v1/completions", completion("chat", prompt, 8, false)).status, 200);
      state = body_json(http(port, "GET", "/admin/models/chat"))["canary"]["state"];
      if (state == until_state) break;
    }
    return std::make_pair(state, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  };
  {
    ServerProcess g(kWork, "canary-bad");
    ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg(slow, "{ttft_p99_ratio: 1.5}"), {"--work-dir", kWork + "/canary-bad.d"}))
        << g.stderr_text();
    ASSERT_TRUE(wait_up(g.port(), {"chat"})) << g.stderr_text();
    for (int i = 0; i < 200 && metric_sum(http(g.port(), "GET", "/metrics").body, "tierserve_gateway_worker_up{") < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto [state, ms] = drive(g.port(), "rolled_back", 20000);
    EXPECT_EQ(state, "rolled_back");
    std::printf("[canary] the slower canary rolled back after %lld ms (window 1500 ms, not asserted)\n", (long long)ms);
    for (int i = 0; i < 20; ++i)
      EXPECT_EQ(http(g.port(), "POST", "/v1/completions", completion("chat", "Once", 2, false)).header("x-tierserve-model-version"), "v1");
    const json ev = body_json(http(g.port(), "GET", "/admin/models/chat/events"))["events"];
    ASSERT_FALSE(ev.empty());
    EXPECT_EQ(ev.back()["event"], "canary_rollback") << ev.dump();
    EXPECT_NE(ev.back()["reasons"][0].get<std::string>().find("TTFT P99"), std::string::npos) << ev.dump();
    const std::string m = http(g.port(), "GET", "/metrics").body;
    EXPECT_EQ(metric_sum(m, "tierserve_gateway_canary_decisions_total{model=\"chat\",decision=\"rollback\"}"), 1) << m;
    EXPECT_NE(g.stderr_text().find("canary rollback"), std::string::npos);
    EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
  }
  {
    // The same model on both sides: within generous thresholds, promoted.
    ServerProcess g(kWork, "canary-good");
    ASSERT_TRUE(g.start_command(TS_TIERSERVE_BIN, "gateway", cfg(fast2, "{ttft_p99_ratio: 50, tpot_p99_ratio: 50, cost_ratio: 50}"),
                                {"--work-dir", kWork + "/canary-good.d"}))
        << g.stderr_text();
    ASSERT_TRUE(wait_up(g.port(), {"chat"})) << g.stderr_text();
    for (int i = 0; i < 200 && metric_sum(http(g.port(), "GET", "/metrics").body, "tierserve_gateway_worker_up{") < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto [state, ms] = drive(g.port(), "promoted", 30000);
    EXPECT_EQ(state, "promoted") << body_json(http(g.port(), "GET", "/admin/models/chat/events")).dump();
    const json st = body_json(http(g.port(), "GET", "/admin/models/chat"));
    EXPECT_EQ(st["stable"], "v2");
    for (int i = 0; i < 10; ++i)
      EXPECT_EQ(http(g.port(), "POST", "/v1/completions", completion("chat", "Once", 2, false)).header("x-tierserve-model-version"), "v2");
    const std::string m = http(g.port(), "GET", "/metrics").body;
    EXPECT_EQ(metric_sum(m, "tierserve_gateway_canary_decisions_total{model=\"chat\",decision=\"advance\"}"), 1) << m;
    EXPECT_EQ(metric_sum(m, "tierserve_gateway_canary_decisions_total{model=\"chat\",decision=\"promote\"}"), 1) << m;
    EXPECT_EQ(g.stop(SIGTERM), 0) << g.stderr_text();
  }
}

}  // namespace
}  // namespace ts
