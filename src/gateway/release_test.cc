// Model versions without sockets: units per (model, version), the weighted split (within
// binomial tolerance), stickiness, live weights, rollback, the stable version, events, and
// the bad input the admin API gets (unknown model or version, weights that do not sum to a
// positive value, a rollback with no stable version), each refused with nothing changed.
#include "gateway/release.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace ts::gateway {
namespace {

using json = nlohmann::json;

GatewayConfig config(const std::string& extra) {
  auto c = parse_gateway_config(
      "workers:\n"
      "  - {name: a1, kind: tierserve, model: chat, version: v1, url: 'http://h:1'}\n"
      "  - {name: a2, kind: tierserve, model: chat, version: v1, url: 'http://h:2'}\n"
      "  - {name: b1, kind: tierserve, model: chat, version: v2, url: 'http://h:3'}\n"
      "  - {name: s, kind: tierserve, model: solo, url: 'http://h:4'}\n" + extra);
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(validate(*c).is_ok()) << validate(*c).to_string();
  return *c;
}

const char* kSplit = "models:\n  chat: {versions: {v1: 90, v2: 10}, stable: v1}\n";

ManualClock clock;

std::map<std::string, int> count(Releases& r, int model, int n, const std::string& sticky_prefix = "") {
  std::map<std::string, int> seen;
  for (int i = 0; i < n; ++i)
    ++seen[r.units()[size_t(r.pick(model, sticky_prefix.empty() ? "" : sticky_prefix + std::to_string(i)))].version];
  return seen;
}

TEST(Releases, UnitsPerModelVersionAndTheSplit) {
  const GatewayConfig c = config(kSplit);
  Releases r(c, c.models(), clock);
  ASSERT_EQ(r.units().size(), 3u);
  EXPECT_EQ(r.unit_of_worker(0), r.unit_of_worker(1));
  EXPECT_NE(r.unit_of_worker(0), r.unit_of_worker(2));
  EXPECT_TRUE(r.versioned(0));
  EXPECT_FALSE(r.versioned(1));
  // 90/10 over 5000 picks: within 4 standard deviations (sd = sqrt(5000 * 0.1 * 0.9) = 21).
  auto seen = count(r, 0, 5000);
  EXPECT_NEAR(seen["v2"], 500, 85) << seen["v1"] << "/" << seen["v2"];
  // Sticky ids spread by the same split, and each keeps its version.
  seen = count(r, 0, 5000, "key-");
  EXPECT_NEAR(seen["v2"], 500, 85);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(r.pick(0, "key-7"), r.pick(0, "key-7"));
  // A model without versions: always its one unit.
  EXPECT_EQ(r.pick(1, ""), r.unit_of_worker(3));
}

TEST(Releases, WeightsRollbackStableAndEvents) {
  const GatewayConfig c = config(kSplit);
  Releases r(c, c.models(), clock);
  json s;
  ASSERT_FALSE(r.set_weights("chat", {{"weights", {{"v1", 0}, {"v2", 1}}}}, "ops", &s));
  EXPECT_EQ(s["versions"]["v2"]["share"], 1.0);
  EXPECT_EQ(count(r, 0, 200)["v2"], 200);
  ASSERT_FALSE(r.rollback("chat", "ops", &s));
  EXPECT_EQ(s["versions"]["v1"]["share"], 1.0);
  EXPECT_EQ(count(r, 0, 200)["v1"], 200);
  // Only the versions given change.
  ASSERT_FALSE(r.set_weights("chat", {{"weights", {{"v2", 1}}}}, "ops", &s));
  EXPECT_DOUBLE_EQ(s["versions"]["v1"]["share"].get<double>(), 0.5);
  ASSERT_FALSE(r.set_stable("chat", {{"version", "v2"}}, "ops", &s));
  EXPECT_EQ(s["stable"], "v2");
  ASSERT_FALSE(r.rollback("chat", "ops", &s));
  EXPECT_EQ(count(r, 0, 100)["v2"], 100);
  ASSERT_FALSE(r.events("chat", &s));
  ASSERT_EQ(s["events"].size(), 5u) << s.dump();
  EXPECT_EQ(s["events"][1]["event"], "rollback");
  EXPECT_EQ(s["events"][1]["to"], "v1");
  EXPECT_EQ(s["events"][4]["by"], "ops");
  EXPECT_EQ(s["events"][4]["split"]["v2"], 1.0);
}

TEST(Releases, BadInputIsRefusedAndChangesNothing) {
  const GatewayConfig c = config("models:\n  chat: {versions: {v1: 1, v2: 1}}\n");
  Releases r(c, c.models(), clock);
  json s, before;
  ASSERT_FALSE(r.state("chat", &before));
  struct Case {
    json body;
    int status;
    const char* code;
  } cases[] = {
      {{{"weights", {{"v1", 0}, {"v2", 0}}}}, 400, "invalid_weight"},
      {{{"weights", {{"v1", -1}}}}, 400, "invalid_weight"},
      {{{"weights", {{"v1", "x"}}}}, 400, "invalid_weight"},
      {{{"weights", {{"v3", 1}}}}, 400, "unknown_version"},
      {{{"weight", {{"v1", 1}}}}, 400, "invalid_request"},
      {json::array(), 400, "invalid_request"},
  };
  for (const auto& k : cases) {
    const Releases::Error e = r.set_weights("chat", k.body, "ops", &s);
    EXPECT_EQ(e.status, k.status) << k.body.dump();
    EXPECT_EQ(e.code, k.code) << k.body.dump();
  }
  EXPECT_EQ(r.set_weights("nope", {{"weights", {{"v1", 1}}}}, "ops", &s).status, 404);
  const Releases::Error e = r.rollback("chat", "ops", &s);
  EXPECT_EQ(e.status, 409);
  EXPECT_EQ(e.code, "no_stable_version");
  EXPECT_EQ(r.set_stable("chat", {{"version", "v9"}}, "ops", &s).code, "unknown_version");
  ASSERT_FALSE(r.state("chat", &s));
  EXPECT_EQ(s, before);
  ASSERT_FALSE(r.events("chat", &s));
  EXPECT_TRUE(s["events"].empty());
}

const char* kCanary =
    "models:\n  chat:\n    versions: {v1: 1, v2: 0}\n    stable: v1\n"
    "    canary: {version: v2, steps: [10, 50, 100], window_ms: 1000, interval_ms: 100, min_requests: 20,\n"
    "             thresholds: {ttft_p99_ratio: 1.5, error_rate_delta: 0.05, cost_ratio: 1.3}}\n";

// n samples for a unit over the last window, each the given TTFT, error and cost.
void feed(Releases& r, int unit, int n, double ttft_s, bool error = false, double cost = 1e-4, int tier = 1) {
  for (int i = 0; i < n; ++i) {
    ReleaseSample s;
    s.t_ns = clock.now_ns();
    s.tier = tier;
    s.ttft_s = ttft_s;
    s.tpot_s = 0.01;
    s.error = error;
    s.cost = cost;
    r.record(unit, s);
  }
}

std::vector<std::string> decide(Releases& r, int64_t advance_ms) {
  clock.advance_ns(advance_ms * 1000000);
  std::vector<std::string> out;
  for (const auto& d : r.tick()) out.push_back(d.decision);
  return out;
}

// A canary as good as the stable version ramps a step per window and is promoted; one
// that is slower, fails more, or costs more is rolled back at its first judged decision.
TEST(Releases, CanaryRampsAndIsPromotedWhenItHolds) {
  const GatewayConfig c = config(kCanary);
  Releases r(c, c.models(), clock);
  const int v1 = r.unit_of_worker(0), v2 = r.unit_of_worker(2);
  json s;
  ASSERT_FALSE(r.state("chat", &s));
  EXPECT_EQ(s["canary"]["state"], "ramping");
  EXPECT_DOUBLE_EQ(s["versions"]["v2"]["share"].get<double>(), 0.1);
  // Too few requests: it holds (decided once per interval, not before).
  EXPECT_TRUE(decide(r, 50).empty());
  EXPECT_EQ(decide(r, 60), std::vector<std::string>{"hold"});
  for (double pct : {50.0, 100.0}) {
    feed(r, v1, 30, 0.10);
    feed(r, v2, 30, 0.11);
    EXPECT_EQ(decide(r, 100), std::vector<std::string>{"hold"}) << "a step lasts a window";
    clock.advance_ns(900 * 1000000LL);
    feed(r, v1, 30, 0.10);
    feed(r, v2, 30, 0.11);
    EXPECT_EQ(decide(r, 10), std::vector<std::string>{"advance"});
    ASSERT_FALSE(r.state("chat", &s));
    EXPECT_DOUBLE_EQ(s["versions"]["v2"]["share"].get<double>(), pct / 100) << s.dump();
  }
  clock.advance_ns(1000 * 1000000LL);
  feed(r, v1, 30, 0.10);
  feed(r, v2, 30, 0.10);
  EXPECT_EQ(decide(r, 10), std::vector<std::string>{"promote"});
  ASSERT_FALSE(r.state("chat", &s));
  EXPECT_EQ(s["stable"], "v2");
  EXPECT_EQ(s["canary"]["state"], "promoted");
  EXPECT_TRUE(decide(r, 1000).empty());  // done: no more decisions
  ASSERT_FALSE(r.events("chat", &s));
  std::vector<std::string> kinds;
  for (const auto& e : s["events"]) kinds.push_back(e["event"]);
  EXPECT_EQ(kinds, (std::vector<std::string>{"canary_start", "canary_hold", "canary_step", "canary_hold", "canary_step",
                                             "canary_promoted"}));
}

TEST(Releases, CanaryWorseThanStableIsRolledBack) {
  struct Case {
    const char* what;
    double ttft;
    bool error;
    double cost;
    const char* reason;
  } cases[] = {{"slower", 0.30, false, 1e-4, "TTFT P99"},
               {"failing", 0.10, true, 1e-4, "error rate"},
               {"dearer", 0.10, false, 2e-4, "cost per 1000"}};
  for (const auto& k : cases) {
    const GatewayConfig c = config(kCanary);
    Releases r(c, c.models(), clock);
    const int v1 = r.unit_of_worker(0), v2 = r.unit_of_worker(2);
    feed(r, v1, 40, 0.10);
    feed(r, v2, 40, k.ttft, k.error, k.cost);
    EXPECT_EQ(decide(r, 100), std::vector<std::string>{"rollback"}) << k.what;
    json s;
    ASSERT_FALSE(r.state("chat", &s));
    EXPECT_EQ(s["versions"]["v1"]["share"], 1.0) << k.what;
    EXPECT_EQ(s["canary"]["state"], "rolled_back");
    ASSERT_FALSE(r.events("chat", &s));
    const json last = s["events"].back();
    EXPECT_EQ(last["event"], "canary_rollback");
    ASSERT_FALSE(last["reasons"].empty());
    EXPECT_NE(last["reasons"][0].get<std::string>().find(k.reason), std::string::npos) << last.dump();
    EXPECT_NE(last["reasons"][0].get<std::string>().find("standard"), std::string::npos) << "the tier is named";
    EXPECT_TRUE(decide(r, 1000).empty());
  }
  // Old samples leave the window: a bad minute long past does not roll back.
  const GatewayConfig c = config(kCanary);
  Releases r(c, c.models(), clock);
  feed(r, r.unit_of_worker(2), 40, 0.30);
  clock.advance_ns(2000 * 1000000LL);
  feed(r, r.unit_of_worker(0), 40, 0.10);
  feed(r, r.unit_of_worker(2), 40, 0.10);
  EXPECT_EQ(decide(r, 10), std::vector<std::string>{"advance"});
  // An operator's split stops the canary.
  json s;
  ASSERT_FALSE(r.set_weights("chat", {{"weights", {{"v2", 0}}}}, "ops", &s));
  EXPECT_EQ(s["canary"]["state"], "stopped");
  EXPECT_TRUE(decide(r, 1000).empty());
}

TEST(Releases, AModelListedTwiceIsRefused) {
  const std::string yaml =
      "workers:\n  - {name: a, kind: tierserve, model: chat, version: v1, url: 'http://h:1'}\n"
      "models:\n  chat: {versions: {v1: 1}}\n  chat: {versions: {v1: 2}}\n";
  auto c = parse_gateway_config(yaml);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("models.chat: listed twice"), std::string::npos) << c.status().to_string();
}

TEST(Releases, ConfigErrorsNameTheField) {
  const std::string workers =
      "workers:\n"
      "  - {name: a, kind: tierserve, model: chat, version: v1, url: 'http://h:1'}\n"
      "  - {name: b, kind: tierserve, model: chat, version: v2, url: 'http://h:2'}\n";
  const std::pair<std::string, std::string> cases[] = {
      {"", "name the split"},
      {"models:\n  chat: {versions: {v1: 0, v2: 0}}\n", "sum to more than 0"},
      {"models:\n  chat: {versions: {v1: 1, v2: -1}}\n", ">= 0"},
      {"models:\n  chat: {versions: {v1: 1, v3: 1}}\n", "unknown version 'v3'"},
      {"models:\n  chat: {versions: {v1: 1}}\n", "'v2' has no weight"},
      {"models:\n  chat: {versions: {v1: 1, v2: 1}, stable: v3}\n", "models.chat.stable"},
      {"models:\n  other: {versions: {v1: 1}}\n", "no worker serves 'other'"},
      {"models:\n  chat: {versions: {v1: 1, v2: 1}, canary: {version: v2}}\n", "judged against the stable version"},
      {"models:\n  chat: {versions: {v1: 1, v2: 1}, stable: v1, canary: {version: v3}}\n", "models.chat.canary.version"},
  };
  for (const auto& [extra, needle] : cases) {
    auto c = parse_gateway_config(workers + extra);
    ASSERT_TRUE(c.is_ok()) << extra << c.status().to_string();
    const Status st = validate(*c);
    EXPECT_NE(st.message().find(needle), std::string::npos) << extra << " -> " << st.message();
  }
  auto c = parse_gateway_config(workers + "models:\n  chat: {versions: {v1: 1, v2: 1}, sticky: sometimes}\n");
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("models.chat.sticky"), std::string::npos);
}

}  // namespace
}  // namespace ts::gateway
