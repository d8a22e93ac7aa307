// The gateway's workers: where each one is, whether it is up, how loaded it is, and — for
// local workers — the process itself.
//
// Local workers are `tierserve serve` processes the gateway starts (`--port 0` and a port
// file, on 127.0.0.1, output appended to WORK_DIR/NAME.log), restarts with backoff after a
// crash (0.5 s doubling to 30 s; back to 0.5 s after a minute up) and stops with SIGTERM
// (their drain), then SIGKILL after the drain timeout. They die with the gateway
// (PR_SET_PDEATHSIG).
//
// Health: every health.interval_ms each worker's readiness route is asked (tierserve:
// /health/ready; llama.cpp and vLLM: /health) with health.timeout_ms to answer. Anything
// but a 200 in time takes the worker out of the fleet at once; the next 200 brings it back.
// A worker that did not answer at all (refused, timed out: dead or hung) also has its calls
// in flight ended (on_unreachable), so that none waits on it. Load: its /metrics every
// fourth check (waiting, running, KV usage under tierserve's, vLLM's or llama.cpp's names).
#pragma once

#include <boost/asio/io_context.hpp>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gateway/config.h"
#include "gateway/fleet.h"
#include "gateway/upstream.h"

namespace ts::gateway {

// The gauges a worker's /metrics text gives, under any of the names above; absent ones 0.
WorkerLoad parse_worker_metrics(std::string_view prometheus_text);

class WorkerSet {
 public:
  struct Info {
    std::string name, kind, model, pool, url;
    bool up = false;
    int64_t pid = 0;          // local workers
    int64_t restarts = 0;
    int64_t health_failures = 0;
    std::string last_error;
    WorkerLoad load;          // from its last /metrics read
  };

  WorkerSet(const GatewayConfig& cfg, boost::asio::io_context& io, Fleet& fleet, std::string serve_binary,
            std::string work_dir);
  ~WorkerSet();  // stop()

  // Starts the local processes and the health checks.
  Status start();
  // SIGTERM to the local workers (they drain), SIGKILL after drain_ms; stops the checks.
  void stop(int64_t drain_ms);

  // The worker's connection pool (null while a local worker has no address yet).
  std::shared_ptr<UpstreamPool> pool(int worker) const;
  // Called when a request could not reach the worker: rechecks it now.
  void report_failure(int worker);
  std::vector<Info> info() const;
  // Runs (on the io thread) when a worker stopped answering at all.
  std::function<void(int worker)> on_unreachable;
  // Runs when a worker's state changes (up/down), for metrics.
  std::function<void(int worker, bool up)> on_health;
  // A local process exited and is restarted (for metrics).
  std::function<void(int worker)> on_restart;

 private:
  struct W;
  void schedule_check(int i, int64_t delay_ms);
  void check(int i);
  void set_up(int i, bool up, bool unreachable, const std::string& why);
  void supervise();  // the local processes' thread
  bool spawn(int i);

  const GatewayConfig& cfg_;
  boost::asio::io_context& io_;
  Fleet& fleet_;
  std::string serve_binary_, work_dir_;
  std::vector<std::unique_ptr<W>> w_;
  mutable std::mutex mu_;
  std::atomic<bool> stopping_{false};
  std::thread supervisor_;
};

}  // namespace ts::gateway
