// `tierserve bench`: a tier-aware load tester for any OpenAI-compatible server (the
// seeds' method as a command: warm-up, cold start, percentiles, the throughput-vs-P99
// knee, payload replay, error rates, cost per 1000 requests, SLO verdicts). It links
// only the bench layer, which talks HTTP; see docs/bench.md.
//
// Exit status: 0 measured (and every SLO passed), 1 runtime error (nothing measured),
// 2 usage error, 3 an SLO failed.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/slo.h"
#include "bench/workload.h"
#include "commands.h"
#include "core/clock.h"

namespace ts::tools {
namespace {

constexpr int kExitSloFail = 3;

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "tierserve bench: %s (see tierserve bench --help)\n", msg.c_str());
  return 2;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "tierserve bench: error: %s\n", msg.c_str());
  return 1;
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return bool(out);
}

// "tier=KEY" pairs into the options' map.
bool parse_pairs(const std::vector<std::string>& in, std::map<std::string, std::string>* out,
                 std::string* bad) {
  for (const auto& s : in) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      *bad = s;
      return false;
    }
    (*out)[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return true;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  bench::Options o;
  std::string workload_path, input_len = "64", output_len = "32", tier_mix, endpoint = "chat";
  std::string arrival = "poisson", slo_path, tier_rate;
  std::string json_path, csv_path, jsonl_path, html_path;
  std::vector<std::string> tier_keys;
  int max_tokens_override = 0;
  bool no_stream = false, no_cold = false, quiet = false, no_usage = false;

  CLI::App app{"Load-test an OpenAI-compatible server per service tier: latency percentiles "
               "from the scheduled send time, SLO verdicts, the throughput-vs-P99 knee, cost.",
               "tierserve bench"};
  app.set_config("--config", "", "TOML/INI file with any of these options (flags win)");
  app.add_option("-u,--url", o.url, "server base URL (http only)")->capture_default_str();
  app.add_option("--compare-url", o.url_b, "comparison mode: a second server, same workload, alternating blocks");
  app.add_option("--label", o.label_a, "name of --url in reports")->capture_default_str();
  app.add_option("--compare-label", o.label_b, "name of --compare-url in reports")->capture_default_str();
  app.add_option("--compare-rounds", o.compare_rounds, "ABBA rounds the steady phase is split into")->capture_default_str();
  app.add_option("--model-version", o.version_a, "through a gateway: pin --url's requests to this model version");
  app.add_option("--compare-version", o.version_b,
                 "comparison mode: pin the second endpoint's requests to this version (--compare-url defaults to --url)");
  app.add_option("--model", o.model, "the request's \"model\" field");
  app.add_option("--api-key", o.api_key, "Authorization: Bearer key for every request");
  app.add_option("--tier-key", tier_keys, "TIER=KEY: the key for requests of that tier (repeatable)");
  app.add_flag("--no-stream", no_stream, "non-streaming requests (TTFT = end-to-end)");
  app.add_flag("--no-usage", no_usage, "do not ask for stream_options.include_usage");
  app.add_option("--temperature", o.temperature, "sent as \"temperature\" (a workload line's own wins); default: not sent")
      ->check(CLI::Range(0.0, 2.0));

  app.add_option("-w,--workload", workload_path, "JSONL file of requests to replay (else synthetic)");
  app.add_option("--input-len", input_len, "synthetic prompt words: N | uniform:A:B | normal:M:S | exp:M | lognormal:MED:SIGMA")->capture_default_str();
  app.add_option("--output-len", output_len, "synthetic max_tokens distribution (same forms)")->capture_default_str();
  app.add_option("--tier-mix", tier_mix, "e.g. ultrafast=20,standard=70,batch=10 (overrides the file's tiers)");
  app.add_option("--endpoint", endpoint, "synthetic requests: chat or completions")
      ->check(CLI::IsMember({"chat", "completions"}))->capture_default_str();
  app.add_option("--max-tokens", max_tokens_override, "override every request's max_tokens");

  app.add_option("--mode", o.mode, "open (arrival rate), closed (concurrency), replay (file offsets)")
      ->check(CLI::IsMember({"open", "closed", "replay"}))->capture_default_str();
  app.add_option("--arrival", arrival, "open loop: constant, poisson or gamma")
      ->check(CLI::IsMember({"constant", "poisson", "gamma"}))->capture_default_str();
  app.add_option("-r,--rate", o.arrival.rate_rps, "open loop: requests per second")->capture_default_str();
  app.add_option("--tier-rate", tier_rate, "open loop: per-tier arrival rates, e.g. ultrafast=1,standard=8 (replaces --rate and --tier-mix)");
  app.add_option("--burstiness", o.arrival.cv, "gamma arrivals: coefficient of variation of the gaps (>1 bursty)")->capture_default_str();
  app.add_option("--ramp-up", o.arrival.ramp_s, "seconds over which the rate rises linearly (excluded from stats)")->capture_default_str();
  app.add_option("-c,--concurrency", o.concurrency, "closed loop: requests in flight")->capture_default_str();
  app.add_option("--replay-speed", o.replay_speed, "replay: offsets divided by this")->capture_default_str();
  app.add_option("--max-inflight", o.max_inflight, "open loop: client cap on requests in flight (late sends show as send lag)")->capture_default_str();

  app.add_flag("--no-cold-start", no_cold, "do not send and report the cold-start request");
  app.add_option("--warmup", o.warmup_requests, "warm-up requests (excluded)")->capture_default_str();
  app.add_option("--warmup-s", o.warmup_s, "warm-up seconds (excluded)")->capture_default_str();
  app.add_option("-n,--requests", o.n_requests, "steady state: number of requests (else --duration)");
  app.add_option("-d,--duration", o.duration_s, "steady state: seconds")->capture_default_str();
  app.add_option("--sweep", o.sweep, "rates (open) or concurrencies (closed) to sweep, comma-separated")->delimiter(',');
  app.add_option("--sweep-metric", o.sweep_metric, "the P99 on the curve: ttft or e2e")
      ->check(CLI::IsMember({"ttft", "e2e"}))->capture_default_str();
  app.add_option("--sweep-step-s", o.sweep_step_s, "seconds per sweep step")->capture_default_str();
  app.add_option("--sweep-step-requests", o.sweep_step_requests, "requests per sweep step (instead of seconds)");

  app.add_option("--slo", slo_path, "SLO file (YAML or JSON); exit 3 when a tier fails");
  app.add_option("--price-per-hour", o.price_per_hour, "instance price per hour for cost per 1000 requests");
  app.add_option("--timeout", o.request_timeout_s, "per-request timeout, seconds")->capture_default_str();
  app.add_option("--bucket-s", o.bucket_s, "time bucket for latency over time and correlation")->capture_default_str();
  app.add_option("-s,--seed", o.seed, "seed of the workload and the arrivals")->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "no live progress line");
  app.add_option("--json", json_path, "write results as JSON");
  app.add_option("--csv", csv_path, "write one CSV row per phase and tier");
  app.add_option("--requests-jsonl", jsonl_path, "write one JSON line per request");
  app.add_option("--html", html_path, "write a self-contained HTML report with charts");

  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.emplace_back(argv[i]);
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  o.stream = !no_stream;
  o.include_usage = !no_usage;
  o.cold_start = !no_cold;
  o.progress = !quiet;
  std::string bad;
  if (!parse_pairs(tier_keys, &o.tier_keys, &bad)) return usage_error("--tier-key wants TIER=KEY, got '" + bad + "'");
  auto kind = bench::parse_arrival_kind(arrival);
  if (!kind.is_ok()) return usage_error(kind.status().message());
  o.arrival.kind = *kind;
  if (!tier_rate.empty()) {
    auto rates = bench::parse_tier_mix(tier_rate);
    if (!rates.is_ok()) return usage_error("--tier-rate: " + rates.status().message());
    if (o.mode != "open") return usage_error("--tier-rate needs --mode open");
    o.arrival.rate_rps = 0;
    for (const auto& w : *rates) {
      o.tier_rates.emplace_back(w.tier.empty() ? "default" : w.tier, w.weight);
      o.arrival.rate_rps += w.weight;
    }
  }
  if (o.mode == "open" && o.sweep.empty() && !(o.arrival.rate_rps > 0)) return usage_error("--rate must be > 0");
  if (o.arrival.kind == bench::ArrivalKind::kGamma && !(o.arrival.cv > 0)) return usage_error("--burstiness must be > 0");
  if (o.mode == "closed" && o.concurrency < 1) return usage_error("--concurrency must be >= 1");
  if (o.max_inflight < 1) return usage_error("--max-inflight must be >= 1");
  if (o.n_requests == 0 && !(o.duration_s > 0)) return usage_error("--duration must be > 0 (or give --requests)");
  for (double x : o.sweep)
    if (!(x > 0)) return usage_error("--sweep values must be > 0");
  if (!(o.request_timeout_s > 0) || !(o.bucket_s > 0)) return usage_error("--timeout and --bucket-s must be > 0");
  if (o.price_per_hour < 0) return usage_error("--price-per-hour must be >= 0");
  if (!(o.replay_speed > 0)) return usage_error("--replay-speed must be > 0");
  if (!o.version_b.empty()) {  // two versions behind one gateway, labelled by version unless named
    if (o.url_b.empty()) o.url_b = o.url;
    if (o.label_a == "A" && !o.version_a.empty()) o.label_a = o.version_a;
    if (o.label_b == "B") o.label_b = o.version_b;
    if (o.version_a == o.version_b) return usage_error("--compare-version must differ from --model-version");
  }
  if (!o.url_b.empty() && o.compare_rounds < 1) return usage_error("--compare-rounds must be >= 1");

  Result<bench::Workload> wl = bench::Workload::synthetic({}, o.seed);
  if (!workload_path.empty()) {
    wl = bench::Workload::from_jsonl(workload_path);
    if (!wl.is_ok()) return fail(wl.status().to_string());
  } else {
    bench::SyntheticSpec spec;
    auto in = bench::parse_length_dist(input_len);
    auto out = bench::parse_length_dist(output_len);
    if (!in.is_ok()) return usage_error("--input-len: " + in.status().message());
    if (!out.is_ok()) return usage_error("--output-len: " + out.status().message());
    spec.input = *in;
    spec.output = *out;
    spec.endpoint = endpoint;
    wl = bench::Workload::synthetic(spec, o.seed);
  }
  if (!tier_mix.empty()) {
    auto mix = bench::parse_tier_mix(tier_mix);
    if (!mix.is_ok()) return usage_error("--tier-mix: " + mix.status().message());
    wl->set_tier_mix(*mix, o.seed);
  }
  if (max_tokens_override < 0) return usage_error("--max-tokens must be >= 0");
  wl->set_max_tokens_override(max_tokens_override);
  if (o.mode == "replay" && !wl->has_offsets())
    return usage_error("--mode replay needs a --workload whose every line has offset_ms");

  if (!slo_path.empty()) {
    auto slo = bench::load_slo_file(slo_path);
    if (!slo.is_ok()) return fail(slo.status().to_string());
    o.slo = std::move(*slo);
    o.slo_given = true;
  }

  SteadyClock clock;
  Result<bench::Report> rep = bench::run_bench(o, *wl, clock);
  if (!rep.is_ok()) return fail(rep.status().to_string());
  std::string cmdline = "tierserve";
  for (int i = 0; i < argc; ++i) cmdline += std::string(" ") + argv[i];
  rep->command_line = cmdline;

  std::fputs(bench::format_summary(*rep).c_str(), stdout);
  std::fflush(stdout);
  struct Out {
    const std::string& path;
    std::string (*render)(const bench::Report&);
  };
  for (const Out& w : {Out{json_path, bench::to_json}, Out{csv_path, bench::to_csv},
                       Out{html_path, bench::to_html}}) {
    if (!w.path.empty() && !write_file(w.path, w.render(*rep))) return fail("cannot write " + w.path);
  }
  if (!jsonl_path.empty() && !write_file(jsonl_path, bench::to_jsonl(rep->records)))
    return fail("cannot write " + jsonl_path);
  if (rep->slo_given && !bench::all_pass(rep->verdicts)) return kExitSloFail;
  return 0;
}

}  // namespace ts::tools
