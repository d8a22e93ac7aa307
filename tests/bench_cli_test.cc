// Black-box tests of `tierserve bench`: the real binary against the deliberately slow
// test server (started in this process): every output file, the SLO exit code, replay of
// a JSONL workload, and usage/connection errors ending in the documented exit codes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../src/bench/testing/slow_server.h"
#include "testing/process.h"

namespace ts {
namespace {

const std::string kWork = std::string(TS_BINARY_DIR) + "/bench_cli_test";

using testing_proc::Proc;
using testing_proc::slurp;
using testing_proc::write_file;

Proc bench(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TS_TIERSERVE_BIN, "bench"};
  argv.insert(argv.end(), args.begin(), args.end());
  return testing_proc::run_captured(argv, kWork + "/stdout", kWork + "/stderr");
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

class BenchCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0); }
};

TEST_F(BenchCli, WritesEveryOutputAndPassesTheSlo) {
  bench::testing::SlowServer srv({.ttft_ms = 10, .tier_ttft_ms = {{"ultrafast", 5}}, .per_token_ms = 2});
  write_file(kWork + "/pass.yaml", "ultrafast:\n  ttft_p99: 500ms\n  error_rate: 0%\nstandard:\n  e2e_p99: 2s\n");
  const Proc p = bench({"--url", srv.url(), "-n", "20", "--rate", "40", "--arrival", "constant", "--warmup", "4",
                        "--tier-mix", "ultrafast=1,standard=1", "--output-len", "4", "--slo", kWork + "/pass.yaml",
                        "--price-per-hour", "2.5", "--json", kWork + "/r.json", "--csv", kWork + "/r.csv",
                        "--requests-jsonl", kWork + "/r.jsonl", "--html", kWork + "/r.html"});
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("SLO verdict"), std::string::npos);
  EXPECT_NE(p.out.find("PASS ultrafast"), std::string::npos);
  EXPECT_NE(p.out.find("cold start"), std::string::npos);
  EXPECT_NE(p.out.find("per 1k requests"), std::string::npos);
  EXPECT_NE(p.err.find("[steady"), std::string::npos);  // the progress line
  const auto j = nlohmann::json::parse(slurp(kWork + "/r.json"));
  EXPECT_EQ(j["steady"]["overall"]["requests"], 20);
  EXPECT_EQ(j["warmup"]["requests"], 4);
  EXPECT_EQ(j["steady"]["tiers"].size(), 2u);
  EXPECT_TRUE(j["slo"]["pass"].get<bool>());
  EXPECT_GT(j["steady"]["overall"]["cost"]["per_1k_requests"].get<double>(), 0);
  EXPECT_EQ(j["cold_start"]["phase"], "cold");
  // 3 rows (two tiers + overall) and a header.
  EXPECT_EQ(lines(slurp(kWork + "/r.csv")), 4u);
  // Per request: the cold one and the steady ones (warm-up is not measured).
  const std::string jl = slurp(kWork + "/r.jsonl");
  EXPECT_EQ(lines(jl), 21u);
  EXPECT_NE(jl.find("\"token_ms\""), std::string::npos);
  EXPECT_NE(slurp(kWork + "/r.html").find("bench-data"), std::string::npos);
  EXPECT_EQ(srv.requests(), 25);
}

TEST_F(BenchCli, FailingSloExitsThree) {
  bench::testing::SlowServer srv({.ttft_ms = 60, .per_token_ms = 1});
  write_file(kWork + "/fail.json", R"({"overall": {"ttft_p50": "<= 20 ms"}})");
  const Proc p = bench({"--url", srv.url(), "-n", "5", "--rate", "20", "--no-cold-start", "-q", "--slo",
                        kWork + "/fail.json"});
  EXPECT_EQ(p.code, 3) << p.out << p.err;
  EXPECT_NE(p.out.find("FAIL overall"), std::string::npos) << p.out;
  EXPECT_EQ(p.err.find("[steady"), std::string::npos);  // -q: no progress line
}

TEST_F(BenchCli, ReplaysAJsonlFileAtItsOffsets) {
  bench::testing::SlowServer srv({.ttft_ms = 5, .per_token_ms = 1});
  write_file(kWork + "/w.jsonl",
        "{\"prompt\": \"a\", \"max_tokens\": 2, \"tier\": \"batch\", \"offset_ms\": 0}\n"
        "{\"messages\": [{\"role\": \"user\", \"content\": \"b\"}], \"max_tokens\": 3, \"offset_ms\": 300}\n");
  const Proc p = bench({"--url", srv.url(), "--workload", kWork + "/w.jsonl", "--mode", "replay", "-n", "4",
                        "--no-cold-start", "-q", "--json", kWork + "/replay.json", "--requests-jsonl",
                        kWork + "/replay.jsonl"});
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  const auto j = nlohmann::json::parse(slurp(kWork + "/replay.json"));
  EXPECT_EQ(j["steady"]["overall"]["requests"], 4);
  EXPECT_EQ(j["steady"]["overall"]["output_tokens"], 2 + 3 + 2 + 3);
  // Offsets 0, 300, 301, 601 ms: the run spans at least 600 ms.
  EXPECT_GE(j["steady"]["duration_s"].get<double>(), 0.6);
  std::istringstream in(slurp(kWork + "/replay.jsonl"));
  std::string line;
  std::vector<int64_t> sched;
  while (std::getline(in, line)) sched.push_back(nlohmann::json::parse(line)["scheduled_ns"].get<int64_t>());
  ASSERT_EQ(sched.size(), 4u);
  EXPECT_NEAR(double(sched[1] - sched[0]) / 1e6, 300, 1);
  EXPECT_NEAR(double(sched[3] - sched[0]) / 1e6, 601, 1);
}

TEST_F(BenchCli, UsageAndConnectionErrors) {
  EXPECT_EQ(bench({"--rate", "0"}).code, 2);
  EXPECT_EQ(bench({"--input-len", "bogus"}).code, 2);
  EXPECT_EQ(bench({"--tier-key", "nokey"}).code, 2);
  EXPECT_EQ(bench({"--mode", "replay"}).code, 2);  // replay needs a file with offsets
  EXPECT_EQ(bench({"--slo", kWork + "/missing.yaml"}).code, 1);
  write_file(kWork + "/bad.yaml", "ultrafast: {ttft_p42: 3}\n");
  const Proc bad = bench({"--slo", kWork + "/bad.yaml"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("ttft_p42"), std::string::npos);
  uint16_t port;
  {
    bench::testing::SlowServer s({});
    port = s.port();
  }
  const Proc p = bench({"--url", "http://127.0.0.1:" + std::to_string(port), "-n", "1", "-q"});
  EXPECT_EQ(p.code, 1);
  EXPECT_NE(p.err.find("cannot connect"), std::string::npos) << p.err;
  EXPECT_EQ(bench({"--help"}).code, 0);
}

}  // namespace
}  // namespace ts
