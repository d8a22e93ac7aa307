// `tierserve bench` against the real `tierserve serve` (stories260K on port 0): tiers
// requested and served, explicit downgrades of a key not entitled to ultrafast, 429s
// of a key over its request rate, 401 without a key, the server's queue time, exact
// token counts, and a sweep with SLO verdicts. Both processes are the real binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/process.h"

namespace ts {
namespace {

const std::string kModel = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kWork = std::string(TS_BINARY_DIR) + "/bench_server_test";

using testing_proc::Proc;
using testing_proc::slurp;
using testing_proc::spawn;
using testing_proc::write_file;

Proc bench(std::vector<std::string> args) {
  args.insert(args.begin(), {TS_TIERSERVE_BIN, "bench"});
  return testing_proc::run_captured(args, kWork + "/bench.out", kWork + "/bench.err");
}

// Keys: "std-key" may use standard only (ultrafast requests are downgraded), "all-key"
// every tier, "slow-key" every tier at 4 requests per minute.
std::string hash(const std::string& key) {
  std::string h =
      testing_proc::run_captured({TS_TIERSERVE_BIN, "serve", "--hash-key", key}, kWork + "/hash.out", kWork + "/hash.err")
          .out;
  while (!h.empty() && (h.back() == '\n' || h.back() == ' ')) h.pop_back();
  return h;
}

class BenchServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0);
    std::ostringstream cfg;
    cfg << "on_unentitled: downgrade\nkeys:\n"
        << "  - name: std\n    sha256: " << hash("std-key") << "\n    tiers: [standard]\n    default_tier: standard\n"
        << "  - name: all\n    sha256: " << hash("all-key") << "\n    tiers: [ultrafast, standard, batch]\n"
        << "    default_tier: standard\n"
        << "  - name: slow\n    sha256: " << hash("slow-key") << "\n    tiers: [ultrafast, standard, batch]\n"
        << "    default_tier: standard\n    requests_per_min: 4\n";
    write_file(kWork + "/tierserve.yaml", cfg.str());
    const std::string port_file = kWork + "/port";
    std::remove(port_file.c_str());
    pid_ = spawn({TS_TIERSERVE_BIN, "serve", "-c", kWork + "/tierserve.yaml", "-m", kModel, "-p", "0", "--port-file",
                  port_file, "-t", "1"},
                 kWork + "/serve.out", kWork + "/serve.err");
    for (int i = 0; i < 300 && slurp(port_file).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::string port = slurp(port_file);
    while (!port.empty() && port.back() == '\n') port.pop_back();
    ASSERT_FALSE(port.empty()) << "server did not start: " << slurp(kWork + "/serve.err");
    url_ = "http://127.0.0.1:" + port;
  }
  static void TearDownTestSuite() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  static nlohmann::json run_json(std::vector<std::string> args, int want_code = 0) {
    const std::string path = kWork + "/r.json";
    std::remove(path.c_str());
    args.insert(args.end(), {"--url", url_, "-q", "--json", path, "--input-len", "8"});
    const Proc p = bench(args);
    EXPECT_EQ(p.code, want_code) << p.out << p.err;
    last_out_ = p.out;
    return nlohmann::json::parse(slurp(path), nullptr, false);
  }
  static nlohmann::json tier(const nlohmann::json& phase, const std::string& name) {
    for (const auto& t : phase["tiers"])
      if (t["tier"] == name) return t;
    return nullptr;
  }
  static inline pid_t pid_ = -1;
  static inline std::string url_;
  static inline std::string last_out_;
};

TEST_F(BenchServer, TiersServedQueueTimeAndExactTokenCounts) {
  const auto j = run_json({"--api-key", "all-key", "-n", "24", "--rate", "30", "--output-len", "8", "--tier-mix",
                           "ultrafast=1,standard=1,batch=1"});
  ASSERT_FALSE(j.is_discarded());
  const auto& o = j["steady"]["overall"];
  EXPECT_EQ(o["requests"], 24);
  EXPECT_EQ(o["ok"], 24);
  EXPECT_EQ(o["output_tokens"], 24 * 8);  // usage.completion_tokens of each stream
  EXPECT_EQ(o["degraded"], 0);
  EXPECT_EQ(o["queue_ms"]["n"], 24);  // tierserve's extension object in every response
  EXPECT_GT(o["ttft_ms"]["p50"].get<double>(), 0);
  EXPECT_LE(o["ttft_ms"]["min"].get<double>(), o["ttft_ms"]["p99"].get<double>());
  for (const char* t : {"ultrafast", "standard", "batch"}) {
    const auto s = tier(j["steady"], t);
    ASSERT_FALSE(s.is_null()) << t;
    EXPECT_EQ(s["tier_served"][t], s["ok"]) << t;
  }
  EXPECT_TRUE(j["cold_start"]["error"].get<std::string>().empty());
}

TEST_F(BenchServer, UnentitledUltrafastIsCountedAsDegraded) {
  const auto j = run_json({"--api-key", "std-key", "-n", "16", "--rate", "30", "--output-len", "4", "--tier-mix",
                           "ultrafast=1,standard=1", "--no-cold-start"});
  ASSERT_FALSE(j.is_discarded());
  const auto uf = tier(j["steady"], "ultrafast"), st = tier(j["steady"], "standard");
  ASSERT_FALSE(uf.is_null());
  ASSERT_FALSE(st.is_null());
  EXPECT_GT(uf["ok"].get<int>(), 0);
  EXPECT_EQ(uf["degraded"], uf["ok"]);
  EXPECT_DOUBLE_EQ(uf["degradation_rate"].get<double>(), 1.0);
  EXPECT_EQ(uf["tier_served"]["standard"], uf["ok"]);
  EXPECT_EQ(st["degraded"], 0);
}

TEST_F(BenchServer, RateLimitedKeyGets429AndNoKeyGets401) {
  auto j = run_json({"--api-key", "slow-key", "-n", "10", "--rate", "20", "--output-len", "2", "--no-cold-start"});
  ASSERT_FALSE(j.is_discarded());
  const auto& o = j["steady"]["overall"];
  EXPECT_EQ(o["ok"], 4);
  EXPECT_EQ(o["errors_by_type"]["http_429"], 6);
  EXPECT_EQ(o["errors_by_code"]["http_429:rate_limit_exceeded"], 6);
  EXPECT_DOUBLE_EQ(o["error_rate"].get<double>(), 0.6);
  j = run_json({"-n", "3", "--rate", "20", "--output-len", "2", "--no-cold-start"});
  EXPECT_EQ(j["steady"]["overall"]["errors_by_type"]["http_401"], 3);
}

TEST_F(BenchServer, ClosedLoopSweepWithSloVerdict) {
  write_file(kWork + "/slo.yaml", "overall:\n  ttft_p99: 5s\n  error_rate: 0\nstandard:\n  e2e_p99: 10s\n");
  const auto j = run_json({"--api-key", "all-key", "--mode", "closed", "--sweep", "1,2,4", "--sweep-step-requests", "8",
                           "--output-len", "8", "--slo", kWork + "/slo.yaml", "--tier-mix", "standard"});
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["sweep"]["steps"].size(), 3u);
  for (const auto& s : j["sweep"]["steps"]) {
    EXPECT_EQ(s["stats"]["overall"]["ok"], 8);
    EXPECT_TRUE(s["slo_pass"].get<bool>());
  }
  EXPECT_EQ(j["sweep"]["max_offered_meeting_slo"], 4);
  EXPECT_TRUE(j["slo"]["pass"].get<bool>());
  EXPECT_NE(last_out_.find("highest concurrency meeting the SLOs: 4"), std::string::npos) << last_out_;
}

}  // namespace
}  // namespace ts
