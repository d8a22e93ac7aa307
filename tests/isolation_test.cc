// The isolation experiment of issue 5 as a black-box test, without timing assertions: the
// real `tierserve serve` (a random-weight 15M llama, so that a request takes real engine
// time) on port 0, `tierserve bench` as the load generator. Standard is flooded at several
// times the capacity measured at the start of the test while ultrafast arrives at a low
// rate; the test checks what must hold on any machine, however noisy:
//  - every ultrafast request succeeds and is served on ultrafast;
//  - every standard request completes or is refused explicitly (429/503 with Retry-After):
//    no timeouts, dropped connections or truncated streams, and the server's request
//    counters agree with what the client saw (nothing lost);
//  - standard gets at least its floor of the tokens the engine processed while flooded.
// The same flood against `--scheduling fifo` must lose nothing either. Ultrafast TTFT
// P50/P99, alone, tiered and FIFO, are printed for the log only: timings belong to
// bench/isolation.sh on a quiet machine.
//
// Then the fast tier offered beyond its share (long prompts at a high rate) against the
// same standard flood: every ultrafast request is either served on ultrafast within the
// scheduler's bound, asserted as the scheduler keeps it (no step with other tiers' work
// planned after its max wait and before its start, from its response's tierserve object;
// the wall-clock queue time is printed against the server's wait bound, not asserted), or
// downgraded or refused explicitly with the reason in its response, and some are (the
// excess is told, not silently slowed); nothing is lost.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "testing/server.h"

namespace ts {
namespace {

using testing_server::http;
using testing_server::ServerProcess;
using testing_server::slurp;

const std::string kWork = std::string(TS_BINARY_DIR) + "/isolation_test";
const std::string kModel = kWork + "/llama15m-q8_0.gguf";
constexpr double kStandardFloor = 0.5;  // the default config's standard share_min
constexpr int kUltrafastMaxWaitMs = 200;
// Ultrafast req/s: low next to the capacity (~40-100 req/s here natively, ~4 under the AMX
// emulation), so that it stays within its share and nothing of it is degraded.
double ultrafast_rate(double capacity_rps) { return std::clamp(0.05 * capacity_rps, 0.5, 4.0); }
constexpr double kFloodFactor = 4;      // standard offered at this multiple of the capacity
constexpr int kFloodS = 5;
// FIFO serves the whole backlog before it ends (no shedding): a shorter flood keeps the
// test short.
constexpr int kFifoFloodS = 3;

// Runs `tierserve bench ARGS --json FILE` against `port`; returns the parsed JSON (discarded
// on failure, with the bench's output in `log`).
nlohmann::json run_bench(int port, const std::string& name, std::vector<std::string> args, std::string* log) {
  const std::string json = kWork + "/" + name + ".json", out = kWork + "/" + name + ".out";
  std::remove(json.c_str());
  std::string cmd = std::string(TS_TIERSERVE_BIN) + " bench --url http://127.0.0.1:" + std::to_string(port) +
                    " -q --no-cold-start --json '" + json + "' --requests-jsonl '" + kWork + "/" + name + ".jsonl'";
  for (const auto& a : args) cmd += " '" + a + "'";
  const int rc = std::system((cmd + " > '" + out + "' 2>&1").c_str());
  *log = "bench exit " + std::to_string(rc) + ": " + slurp(out);
  return nlohmann::json::parse(slurp(json), nullptr, false);
}

nlohmann::json tier_of(const nlohmann::json& j, const std::string& name) {
  for (const auto& t : j["steady"]["tiers"])
    if (t["tier"] == name) return t;
  return nlohmann::json::object();
}

// Prometheus counters and gauges of /metrics as "name{labels}" -> value.
std::map<std::string, double> scrape(int port) {
  std::map<std::string, double> m;
  std::istringstream in(http(port, "GET", "/metrics").body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    m[line.substr(0, sp)] = std::atof(line.c_str() + sp + 1);
  }
  return m;
}

double counter(const std::map<std::string, double>& m, const std::string& name, const std::string& tier,
               const std::string& label, const std::string& value) {
  auto it = m.find(name + "{tier=\"" + tier + "\"," + label + "=\"" + value + "\"}");
  return it == m.end() ? 0 : it->second;
}

// Samples the standard tier's queue and share-of-step-budget gauges while a flood runs.
class GaugeSampler {
 public:
  explicit GaugeSampler(int port) : port_(port), th_([this] { loop(); }) {}
  ~GaugeSampler() { stop(); }
  void stop() {
    stop_ = true;
    if (th_.joinable()) th_.join();
  }
  int n_with_demand = 0;  // samples where standard had queued requests
  double share_sum = 0;   // ... and the sum of its share gauge over them

 private:
  void loop() {
    while (!stop_) {
      const auto m = scrape(port_);
      const auto q = m.find("tierserve_queued_requests{tier=\"standard\"}");
      const auto s = m.find("tierserve_step_budget_share_ratio{tier=\"standard\"}");
      if (q != m.end() && s != m.end() && q->second > 0) {
        ++n_with_demand;
        share_sum += s->second;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  int port_;
  std::atomic<bool> stop_{false};
  std::thread th_;
};

struct FloodResult {
  nlohmann::json uf, st;
  std::map<std::string, double> before, after;
  double gauge_share_mean = -1;
};

class Isolation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0);
    const std::string cmd = std::string(TS_TIERSERVE_BIN) + " make-model --arch llama --shape 15m --type q8_0 -o '" +
                            kModel + "' > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }

  // Standard's max wait is cut from 5 s to 1.5 s so that the flood reaches rejection
  // within the test's few seconds (the behavior is the same as with 5 s, only sooner).
  // Ultrafast's is the default's, stated here because the test reasons with it.
  static bool start(ServerProcess& s, const std::string& scheduling) {
    return s.start(TS_TIERSERVE_BIN, "",
                   {"-m", kModel, "-t", "2", "--scheduling", scheduling, "--tier", "standard.max_queue_wait_ms=1500",
                    "--tier", "ultrafast.max_queue_wait_ms=" + std::to_string(kUltrafastMaxWaitMs)});
  }

  // Ultrafast at `uf_rate` + standard at `std_rate` for `duration_s`.
  static FloodResult flood(int port, const std::string& name, double uf_rate, double std_rate, int duration_s,
                           bool sample) {
    FloodResult r;
    r.before = scrape(port);
    std::unique_ptr<GaugeSampler> sampler;
    if (sample) sampler = std::make_unique<GaugeSampler>(port);
    std::string log;
    char rates[128];
    std::snprintf(rates, sizeof rates, "ultrafast=%g,standard=%.1f", uf_rate, std_rate);
    const auto j = run_bench(port, name,
                             {"--tier-rate", rates, "--arrival", "poisson", "--seed", "7", "--duration",
                              std::to_string(duration_s), "--input-len", "32", "--output-len", "16", "--timeout", "60"},
                             &log);
    if (sampler) {
      sampler->stop();
      if (sampler->n_with_demand > 0) r.gauge_share_mean = sampler->share_sum / sampler->n_with_demand;
    }
    r.after = scrape(port);
    EXPECT_FALSE(j.is_discarded()) << log;
    if (j.is_discarded()) return r;
    r.uf = tier_of(j, "ultrafast");
    r.st = tier_of(j, "standard");
    return r;
  }

  // Refusals the client saw: a 429/503 before the headers, or an in-stream refusal event
  // (queue_timeout, shedding) after a stream's headers went out at admission.
  static int refused(const nlohmann::json& t) {
    const auto& e = t["errors_by_type"];
    return e.value("http_429", 0) + e.value("http_503", 0) + e.value("stream_refused", 0);
  }

  // Nothing lost: every request of `t` completed or was refused explicitly, a 429/503
  // with a Retry-After (read from the per-request JSONL of run `name`) or in-band.
  static void expect_nothing_lost(const nlohmann::json& t, const std::string& name, const std::string& tier) {
    const int n_429 = t["errors_by_type"].value("http_429", 0), n_503 = t["errors_by_type"].value("http_503", 0);
    EXPECT_EQ(t.value("ok", -1) + refused(t), t.value("requests", -2))
        << tier << ": errors other than refusals (timeouts, drops, truncated streams): " << t["errors_by_type"].dump();
    std::ifstream in(kWork + "/" + name + ".jsonl");
    std::string line;
    int n_refused = 0;
    while (std::getline(in, line)) {
      const auto r = nlohmann::json::parse(line, nullptr, false);
      if (r.is_discarded() || r["tier_requested"] != tier) continue;
      const int status = r.value("status", 0);
      if (status != 429 && status != 503) continue;
      ++n_refused;
      EXPECT_TRUE(r.contains("retry_after_s") && r["retry_after_s"].get<double>() >= 1) << line;
    }
    EXPECT_EQ(n_refused, n_429 + n_503) << tier;
  }

  // The server's counters moved by exactly what the client saw for `tier`.
  static void expect_counters_agree(const FloodResult& r, const nlohmann::json& t, const std::string& tier) {
    auto delta = [&](const std::string& outcome) {
      return counter(r.after, "tierserve_requests_total", tier, "outcome", outcome) -
             counter(r.before, "tierserve_requests_total", tier, "outcome", outcome);
    };
    const int n_refused = refused(t);
    EXPECT_EQ(delta("ok"), t.value("ok", -1)) << tier;
    EXPECT_EQ(delta("rejected"), n_refused) << tier;
    EXPECT_EQ(delta("error"), 0) << tier;
    EXPECT_EQ(delta("cancelled"), 0) << tier;
  }

  static double tokens_delta(const FloodResult& r, const std::string& tier) {
    double d = 0;
    for (const char* dir : {"in", "out"})
      d += counter(r.after, "tierserve_tokens_total", tier, "direction", dir) -
           counter(r.before, "tierserve_tokens_total", tier, "direction", dir);
    return d;
  }
};

std::string ttft(const nlohmann::json& t) {
  if (!t.contains("ttft_ms") || t["ttft_ms"].value("n", 0) == 0) return "- / -";
  char b[64];
  std::snprintf(b, sizeof b, "%.0f / %.0f", t["ttft_ms"]["p50"].get<double>(), t["ttft_ms"]["p99"].get<double>());
  return b;
}

TEST_F(Isolation, UltrafastServedStandardFlooredNothingLostTieredAndFifo) {
  std::string log;
  double capacity_rps = 0;
  std::string baseline, tiered_ttft, fifo_ttft;
  {
    ServerProcess s(kWork, "tiered");
    ASSERT_TRUE(start(s, "tiered")) << s.stderr_text();
    // What the engine sustains: a closed loop deep enough to fill the batch.
    auto cap = run_bench(s.port(), "capacity",
                         {"--mode", "closed", "-c", "16", "-n", "48", "--warmup", "8", "--tier-mix", "standard",
                          "--input-len", "32", "--output-len", "16"},
                         &log);
    ASSERT_FALSE(cap.is_discarded()) << log;
    capacity_rps = cap["steady"]["overall"]["throughput_rps"].get<double>();
    ASSERT_GT(capacity_rps, 0) << log;
    auto alone = run_bench(s.port(), "alone",
                           {"--tier-rate", "ultrafast=" + std::to_string(ultrafast_rate(capacity_rps)), "--arrival", "poisson",
                            "--seed", "7", "-n", "8", "--input-len", "32", "--output-len", "16"},
                           &log);
    ASSERT_FALSE(alone.is_discarded()) << log;
    baseline = ttft(tier_of(alone, "ultrafast"));

    // Long enough for about 8 fast arrivals (the interruption check below needs some: at
    // 0.5 req/s a 5 s flood saw none about one run in ten).
    const int flood_s = std::max(kFloodS, int(std::ceil(8.0 / ultrafast_rate(capacity_rps))));
    const FloodResult r = flood(s.port(), "tiered", ultrafast_rate(capacity_rps), kFloodFactor * capacity_rps, flood_s, true);
    ASSERT_FALSE(r.uf.is_null() || r.st.is_null());
    tiered_ttft = ttft(r.uf);
    // Every ultrafast request succeeded on ultrafast, none refused or degraded.
    EXPECT_GT(r.uf.value("requests", 0), 0);
    EXPECT_EQ(r.uf.value("ok", -1), r.uf.value("requests", -2)) << r.uf["errors_by_code"].dump();
    EXPECT_EQ(r.uf["tier_served"].value("ultrafast", -1), r.uf.value("ok", -2)) << r.uf["tier_served"].dump();
    EXPECT_EQ(r.uf.value("degraded", -1), 0);
    // Standard: completed or explicitly refused, and the server agrees.
    expect_nothing_lost(r.st, "tiered", "standard");
    expect_counters_agree(r, r.uf, "ultrafast");
    expect_counters_agree(r, r.st, "standard");
    EXPECT_GT(r.st.value("ok", 0), 0) << "standard was starved";
    // Standard had demand for the whole flood (it was refusing work), so its floor is a
    // lower bound on its share of the tokens the engine processed.
    const double st_tok = tokens_delta(r, "standard"), uf_tok = tokens_delta(r, "ultrafast");
    ASSERT_GT(st_tok + uf_tok, 0);
    const double share = st_tok / (st_tok + uf_tok);
    EXPECT_GE(share, kStandardFloor) << "standard " << st_tok << " tokens, ultrafast " << uf_tok;
    // Ultrafast arrivals interrupted steps in flight (docs/scheduler.md 6c): under a flood
    // nearly every arrival finds one running.
    const auto interrupted = [](const std::map<std::string, double>& m) {
      auto it = m.find("tierserve_steps_interrupted_total");
      return it == m.end() ? -1.0 : it->second;
    };
    EXPECT_GT(interrupted(r.after) - interrupted(r.before), 0);
    std::printf("[isolation] capacity %.1f req/s; flood standard %.1f req/s for %d s: %d ok, %s refused; "
                "standard token share %.3f (floor %.2f); mean step-budget share gauge while queued %.3f; "
                "steps interrupted %.0f\n",
                capacity_rps, kFloodFactor * capacity_rps, flood_s, r.st.value("ok", 0),
                r.st["errors_by_code"].dump().c_str(), share, kStandardFloor, r.gauge_share_mean,
                interrupted(r.after) - interrupted(r.before));
    EXPECT_EQ(s.stop(), 0) << s.stderr_text();
  }
  {
    // FIFO: no tiers to protect ultrafast, but still nothing may be lost.
    ServerProcess s(kWork, "fifo");
    ASSERT_TRUE(start(s, "fifo")) << s.stderr_text();
    const FloodResult r = flood(s.port(), "fifo", ultrafast_rate(capacity_rps), kFloodFactor * capacity_rps, kFifoFloodS, false);
    ASSERT_FALSE(r.uf.is_null() || r.st.is_null());
    fifo_ttft = ttft(r.uf);
    expect_nothing_lost(r.uf, "fifo", "ultrafast");
    expect_nothing_lost(r.st, "fifo", "standard");
    std::printf("[isolation] fifo: ultrafast %d/%d ok, standard %d/%d ok, refused %s / %s\n", r.uf.value("ok", 0),
                r.uf.value("requests", 0), r.st.value("ok", 0), r.st.value("requests", 0),
                r.uf["errors_by_code"].dump().c_str(), r.st["errors_by_code"].dump().c_str());
    EXPECT_EQ(s.stop(), 0) << s.stderr_text();
  }
  std::printf("[isolation] ultrafast TTFT P50 / P99 ms (not asserted): alone %s, tiered flood %s, fifo flood %s\n",
              baseline.c_str(), tiered_ttft.c_str(), fifo_ttft.c_str());
}

// Beyond its share: ultrafast with ~500-token prompts at ~twice what 0.3 of the engine's
// prompt rate serves, while standard floods at 3x capacity.
TEST_F(Isolation, UltrafastBeyondItsShareIsToldAndTheAdmittedWaitWithinTheBound) {
  ServerProcess s(kWork, "beyond");
  ASSERT_TRUE(start(s, "tiered")) << s.stderr_text();
  const auto stats = nlohmann::json::parse(http(s.port(), "GET", "/admin/stats").body, nullptr, false);
  ASSERT_TRUE(stats.contains("wait_bound_ms") && stats["wait_bound_ms"].contains("ultrafast")) << stats.dump();
  const double bound_ms = stats["wait_bound_ms"]["ultrafast"].get<double>();
  const double token_ms = stats["step_cost"]["token_ms"].get<double>();
  ASSERT_GT(token_ms, 0);
  // Up to 400 words (~520 tokens) per ultrafast prompt, and at most half of what the tier's
  // windowed share admits at once (share x budget x 64 steps: the derived budget is small
  // on a slow machine or under the AMX emulation), so that the first arrivals are served
  // and the test sees both sides; offered at twice its share of the prompt rate.
  const double share = 0.3, words_per_token = 1.0 / 1.3;
  const int64_t budget = stats["step_token_budget"].get<int64_t>();
  const double prompt_tokens = std::min(520.0, 0.5 * share * double(budget) * 64);
  const int prompt_words = std::max(8, int(prompt_tokens * words_per_token));
  const double uf_rate = std::clamp(2.0 * share * (1000.0 / token_ms) / prompt_tokens, 2.0, 200.0);
  std::string log;
  auto cap = run_bench(s.port(), "beyond-capacity",
                       {"--mode", "closed", "-c", "16", "-n", "48", "--warmup", "8", "--tier-mix", "standard",
                        "--input-len", "32", "--output-len", "16"},
                       &log);
  ASSERT_FALSE(cap.is_discarded()) << log;
  const double std_rate = kFloodFactor * cap["steady"]["overall"]["throughput_rps"].get<double>();
  const auto before = scrape(s.port());
  char rates[128];
  std::snprintf(rates, sizeof rates, "ultrafast=%.2f,standard=%.1f", uf_rate, std_rate);
  // One workload for both tiers: the long prompts are the ultrafast ones' (standard's
  // share of the tokens is not what this test is about).
  const auto j = run_bench(s.port(), "beyond",
                           {"--tier-rate", rates, "--arrival", "poisson", "--seed", "11", "--duration", "6",
                            "--input-len", std::to_string(prompt_words), "--output-len", "8", "--timeout", "60"},
                           &log);
  ASSERT_FALSE(j.is_discarded()) << log;
  const auto after = scrape(s.port());
  int n_admitted = 0, n_told = 0, n_over = 0, steps_behind = 0;
  double worst = 0;
  std::ifstream in(kWork + "/beyond.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded() || r["tier_requested"] != "ultrafast") continue;
    const int status = r.value("status", 0);
    if (status == 200 && r["tier_served"] == "ultrafast") {
      ++n_admitted;
      worst = std::max(worst, r.value("server_queue_ms", -1.0));
      // The bound as the scheduler keeps it, counted in steps (no clock involved): once its
      // max wait is over, no step with other tiers' work is planned before it starts.
      EXPECT_TRUE(r.contains("steps_behind_after_max_wait")) << line;
      if (r.value("steps_behind_after_max_wait", -1) != 0) ++n_over;
      steps_behind = std::max(steps_behind, r.value("steps_behind", 0));
      continue;
    }
    // Not served on ultrafast: said explicitly, in the response.
    ++n_told;
    if (status == 200) {
      EXPECT_FALSE(r.value("degraded_reason", std::string()).empty()) << line;
    } else {
      EXPECT_TRUE(status == 429 || status == 503) << line;
    }
  }
  // A lone arrival is admitted when one full step, at the step times measured while the
  // flood ran (the server rescales its cost model as it goes), is shorter than the tier's
  // max wait: that step is what its predicted wait starts from (its prompt fits the
  // window's share by the choice of length above).
  const auto end_stats = nlohmann::json::parse(http(s.port(), "GET", "/admin/stats").body, nullptr, false);
  ASSERT_TRUE(end_stats.contains("step_cost")) << end_stats.dump();
  const double segment_ms = end_stats["step_cost"].value("segment_ms", 0.0);
  const double max_wait_ms = kUltrafastMaxWaitMs;
  const bool admissible = segment_ms < max_wait_ms;
  if (admissible) {
    EXPECT_GT(n_admitted, 0) << "one full step " << segment_ms << " ms, step budget " << budget << " tokens";
  }
  EXPECT_EQ(n_over, 0) << n_over << " admitted ultrafast requests waited behind other tiers' steps after their max wait";
  EXPECT_GT(n_told, 0) << "the fast tier was offered twice its share and nobody was told";
  const double predicted = [&] {
    double d = 0;
    for (const auto& [k, v] : after)
      if (k.rfind("tierserve_degradations_total{", 0) == 0 && k.find("tier_requested=\"ultrafast\"") != std::string::npos &&
          k.find("reason=\"predicted_wait\"") != std::string::npos)
        d += v - (before.count(k) ? before.at(k) : 0.0);
    return d;
  }();
  EXPECT_GT(predicted, 0) << "no ultrafast degradation with reason predicted_wait in /metrics";
  // Nothing lost, on either tier.
  expect_nothing_lost(tier_of(j, "standard"), "beyond", "standard");
  const auto uf = tier_of(j, "ultrafast");
  EXPECT_EQ(uf.value("ok", -1) + refused(uf), uf.value("requests", -2)) << uf["errors_by_type"].dump();
  std::printf("[isolation] beyond its share: ultrafast %.1f req/s of ~%.0f-token prompts: %d served on ultrafast "
              "(worst queue %.1f ms, not asserted; the server's bound %.1f ms; at most %d steps of other tiers "
              "waited through), %d downgraded or refused explicitly (%.0f by predicted_wait); step budget %lld "
              "tokens, one full step %.1f ms at the end (max wait %.0f ms)\n",
              uf_rate, prompt_tokens, n_admitted, worst, bound_ms, steps_behind, n_told, predicted, (long long)budget, segment_ms,
              max_wait_ms);
  EXPECT_EQ(s.stop(), 0) << s.stderr_text();
}

}  // namespace
}  // namespace ts
