// `tierserve bench`: the run itself. Options -> requests on the wire -> Report.
//
// Talks HTTP/1.1 to one (or, in comparison mode, two) OpenAI-compatible servers with an
// async client (one io_context, many keep-alive connections). Phases run in order:
// cold start (one request, reported apart), warm-up (excluded), ramp-up (excluded), then
// the measured steady state, or a sweep of rates/concurrencies with one measured step
// each.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/arrival.h"
#include "bench/report.h"
#include "bench/slo.h"
#include "bench/workload.h"
#include "core/clock.h"
#include "core/status.h"

namespace ts::bench {

struct Options {
  std::string url = "http://127.0.0.1:8080";  // base URL; /v1/... is appended
  std::string url_b;                           // comparison mode: the second endpoint
  std::string label_a = "A", label_b = "B";
  // Through a gateway: the model version each endpoint's requests are pinned to
  // (x-tierserve-model-version; "" = the gateway's split). Comparison mode may compare two
  // versions behind one URL.
  std::string version_a, version_b;
  std::string model;                           // "model" field of each request
  std::string api_key;                         // default Authorization: Bearer key
  std::map<std::string, std::string> tier_keys;  // tier -> key
  bool stream = true;
  bool include_usage = true;                   // stream_options.include_usage
  std::optional<double> temperature;           // sent when set (a request's own wins)

  // Load shape.
  std::string mode = "open";  // "open" (rate), "closed" (concurrency), "replay" (file offsets)
  ArrivalSpec arrival;        // open loop
  // Open loop: an arrival process per tier (tier -> req/s), overriding the workload's
  // tiers; arrival.rate_rps is then their sum. Lets one tier's load change while
  // another's stays fixed (the isolation experiment).
  std::vector<std::pair<std::string, double>> tier_rates;
  int concurrency = 4;        // closed loop
  double replay_speed = 1;    // replay: offsets divided by this
  int max_inflight = 1024;    // client cap on concurrent requests (open loop); sends
                              // past it wait, and the wait shows as send lag

  // Phases.
  bool cold_start = true;     // send one request first and report it apart
  size_t warmup_requests = 0;
  double warmup_s = 0;
  size_t n_requests = 0;      // steady state: count, or
  double duration_s = 10;     // duration (when n_requests == 0)

  // Sweep: rates (open) or concurrencies (closed); empty = no sweep.
  std::vector<double> sweep;
  std::string sweep_metric = "ttft";  // "ttft" or "e2e"
  double sweep_step_s = 5;            // steady time per step
  size_t sweep_step_requests = 0;     // or a count per step

  double request_timeout_s = 120;
  double bucket_s = 1;
  double price_per_hour = 0;
  uint64_t seed = 1;
  bool progress = true;       // live line on stderr
  SloSpec slo;
  bool slo_given = false;
  int compare_rounds = 2;     // comparison mode: ABBA blocks of the steady phase
};

// Runs the benchmark. Errors are configuration or connection failures that stop the run
// before it measured anything; failed requests are results, not errors. `clock` stamps
// every record; send timers run on std::chrono::steady_clock, so a live run needs a
// clock on that time base (SteadyClock). Everything computed from records (aggregate,
// SLO, knee, cost) is pure and tested with hand-made records and curves instead.
// Sweep runs against `url` only (comparison mode has no sweep).
Result<Report> run_bench(const Options& opt, const Workload& workload, const Clock& clock);

}  // namespace ts::bench
