// What the client records about one request. All times are ns on the run's clock; the
// latencies derived from them start at the request's *scheduled* send time, so a client
// or server stall that delays sends is charged to the requests it delayed (no
// coordinated omission), and `sent_ns - scheduled_ns` is reported as send lag.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace ts::bench {

struct RequestRecord {
  size_t index = 0;           // position in the workload
  std::string phase;          // "cold", "warmup", "ramp", "steady", "sweep:<x>"
  std::string target;         // endpoint label ("A"/"B" in comparison mode)
  std::string tier_requested; // "" = server default
  std::string tier_served;    // from the response body / x-tierserve-tier-served
  std::string tier_resolved;  // the server's name for the tier asked for
                              // (x-tierserve-tier-requested / tierserve.tier_requested)
  std::string degraded_reason;
  bool streamed = true;
  int max_tokens = 0;

  int64_t scheduled_ns = 0;   // when the schedule said to send
  int64_t sent_ns = 0;        // when the request was written
  int64_t first_token_ns = 0; // first content chunk (0 = none)
  int64_t end_ns = 0;         // response complete or failed
  std::vector<int64_t> token_ns;  // arrival of each content chunk

  int http_status = 0;        // 0 = no response
  std::string error;          // "" = ok; else a type: http_<status> (http_429, http_503,
                              // ...), connect, timeout, write, read, protocol, incomplete,
                              // stream_error, stream_refused (an in-stream error
                              // before any token with a refusal code: queue_timeout...)
  std::string error_detail;
  std::string error_code;     // the error object's "code" (queue_full, rate_limit_exceeded...)
  int n_tier_changes = 0;     // in-band ": tierserve tier_changed ..." comments
  double retry_after_s = NAN;
  int n_output_tokens = 0;    // usage.completion_tokens, else content chunks
  int n_prompt_tokens = 0;    // usage.prompt_tokens when reported
  double server_queue_ms = NAN;  // the response's tierserve.queue_ms
  double server_ttft_ms = NAN;
  int preemptions = -1;
  // Interrupting tiers (-1: not reported): steps of other tiers it waited through before
  // it started, and those planned after its max wait (the tierserve object).
  int steps_behind = -1;
  int steps_behind_after_max_wait = -1;

  bool ok() const { return error.empty(); }
  // Served by another tier than asked for. Compares the server's own name for the
  // requested tier when it says it, else OpenAI's aliases (priority = ultrafast,
  // default/auto = standard, flex = batch), so "auto" served as "default" is no downgrade.
  bool degraded() const {
    if (!ok() || tier_served.empty() || tier_requested.empty()) return false;
    return canonical_tier(tier_served) != canonical_tier(tier_resolved.empty() ? tier_requested : tier_resolved);
  }
  static std::string canonical_tier(const std::string& t) {
    if (t == "priority") return "ultrafast";
    if (t == "default" || t == "auto") return "standard";
    if (t == "flex") return "batch";
    return t;
  }
  double send_lag_ms() const { return double(sent_ns - scheduled_ns) / 1e6; }
  double ttft_ms() const { return first_token_ns ? double(first_token_ns - scheduled_ns) / 1e6 : NAN; }
  double e2e_ms() const { return double(end_ns - scheduled_ns) / 1e6; }
  // Time per output token after the first: (last token - first token) / (n - 1), the
  // last token being the last content chunk (the end of the body without chunk times).
  double tpot_ms() const {
    if (!first_token_ns || n_output_tokens < 2) return NAN;
    const int64_t last = token_ns.size() >= 2 ? token_ns.back() : end_ns;
    return double(last - first_token_ns) / 1e6 / double(n_output_tokens - 1);
  }
};

}  // namespace ts::bench
