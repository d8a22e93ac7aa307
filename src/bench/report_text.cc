// Report writers: terminal summary, JSON, CSV and per-request JSONL.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/report.h"

namespace ts::bench {

namespace {

using nlohmann::json;

std::string num(double v, const char* f = "%.1f") {
  if (std::isnan(v)) return "-";
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pct(double v) { return std::isnan(v) ? "-" : num(v * 100, "%.2f%%"); }

json jnum(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json summary_json(const Summary& s) {
  return {{"n", s.n},          {"min", jnum(s.min)}, {"p50", jnum(s.p50)},     {"p90", jnum(s.p90)},
          {"p95", jnum(s.p95)}, {"p99", jnum(s.p99)}, {"p99.9", jnum(s.p999)}, {"max", jnum(s.max)},
          {"mean", jnum(s.mean)}};
}

json slice_json(const SliceStats& s) {
  json j = {{"tier", s.tier},
            {"requests", s.n},
            {"ok", s.n_ok},
            {"errors", s.n_errors},
            {"errors_by_type", s.errors},
            {"errors_by_code", s.error_codes},
            {"error_rate", jnum(s.error_rate)},
            {"degraded", s.n_degraded},
            {"degradation_rate", jnum(s.degradation_rate)},
            {"tier_served", s.served},
            {"duration_s", s.duration_s},
            {"throughput_rps", s.rps},
            {"output_tokens", s.output_tokens},
            {"output_tok_s", s.output_tok_s},
            {"good", s.n_good},
            {"goodput_rps", s.goodput_rps},
            {"ttft_ms", summary_json(s.ttft_ms)},
            {"itl_ms", summary_json(s.itl_ms)},
            {"tpot_ms", summary_json(s.tpot_ms)},
            {"e2e_ms", summary_json(s.e2e_ms)},
            {"queue_ms", summary_json(s.queue_ms)},
            {"send_lag_ms", summary_json(s.send_lag_ms)}};
  if (!std::isnan(s.cost_per_1k_requests) || !std::isnan(s.cost_per_1m_output_tokens))
    j["cost"] = {{"share", jnum(s.cost_share)},
                 {"per_1k_requests", jnum(s.cost_per_1k_requests)},
                 {"per_1m_output_tokens", jnum(s.cost_per_1m_output_tokens)}};
  return j;
}

json phase_json(const PhaseStats& p) {
  json tiers = json::array();
  for (const auto& t : p.tiers) tiers.push_back(slice_json(t));
  json series = json::array();
  for (const auto& s : p.series) {
    json a = json::array(), b = json::array();
    for (double v : s.ttft_ms) a.push_back(jnum(v));
    for (double v : s.e2e_ms) b.push_back(jnum(v));
    series.push_back({{"tier", s.tier}, {"t_s", s.t_s}, {"ttft_ms", a}, {"e2e_ms", b}});
  }
  return {{"phase", p.phase},
          {"duration_s", p.duration_s},
          {"overall", slice_json(p.overall)},
          {"tiers", tiers},
          {"bucket_s", p.bucket_s},
          {"latency_over_time", series},
          {"correlation", {{"ultrafast_standard_ttft", jnum(p.ultrafast_standard_ttft_corr)},
                           {"ultrafast_standard_e2e", jnum(p.ultrafast_standard_e2e_corr)}}}};
}

json record_json(const RequestRecord& r) {
  json tokens = json::array();
  for (int64_t t : r.token_ns) tokens.push_back(double(t - r.scheduled_ns) / 1e6);
  json j = {{"index", r.index},
            {"phase", r.phase},
            {"target", r.target},
            {"tier_requested", r.tier_requested},
            {"tier_resolved", r.tier_resolved},
            {"tier_served", r.tier_served},
            {"degraded_reason", r.degraded_reason},
            {"status", r.http_status},
            {"error", r.error},
            {"scheduled_ns", r.scheduled_ns},
            {"send_lag_ms", r.send_lag_ms()},
            {"ttft_ms", jnum(r.ttft_ms())},
            {"tpot_ms", jnum(r.tpot_ms())},
            {"e2e_ms", r.e2e_ms()},
            {"max_tokens", r.max_tokens},
            {"output_tokens", r.n_output_tokens},
            {"prompt_tokens", r.n_prompt_tokens},
            {"server_queue_ms", jnum(r.server_queue_ms)},
            {"server_ttft_ms", jnum(r.server_ttft_ms)},
            {"token_ms", tokens}};
  if (r.preemptions >= 0) j["preemptions"] = r.preemptions;
  if (r.steps_behind >= 0) {
    j["steps_behind"] = r.steps_behind;
    j["steps_behind_after_max_wait"] = r.steps_behind_after_max_wait;
  }
  if (!std::isnan(r.retry_after_s)) j["retry_after_s"] = r.retry_after_s;
  if (!r.error_detail.empty()) j["error_detail"] = r.error_detail;
  if (!r.error_code.empty()) j["error_code"] = r.error_code;
  if (r.n_tier_changes) j["tier_changes"] = r.n_tier_changes;
  return j;
}

void latency_table(std::ostringstream& o, const char* title, const PhaseStats& p, Summary SliceStats::*m) {
  bool any = (p.overall.*m).n > 0;
  if (!any) return;
  char b[256];
  std::snprintf(b, sizeof b, "  %-14s %8s %8s %8s %8s %8s %8s %8s %8s %7s\n", title, "min", "p50", "p90", "p95", "p99",
                "p99.9", "max", "mean", "n");
  o << b;
  auto row = [&](const SliceStats& s) {
    const Summary& x = s.*m;
    std::snprintf(b, sizeof b, "    %-12s %8s %8s %8s %8s %8s %8s %8s %8s %7zu\n", s.tier.c_str(), num(x.min).c_str(),
                  num(x.p50).c_str(), num(x.p90).c_str(), num(x.p95).c_str(), num(x.p99).c_str(), num(x.p999).c_str(),
                  num(x.max).c_str(), num(x.mean).c_str(), x.n);
    o << b;
  };
  for (const auto& t : p.tiers) row(t);
  if (p.tiers.size() != 1) row(p.overall);
}

void phase_text(std::ostringstream& o, const PhaseStats& p, double price) {
  char b[320];
  std::snprintf(b, sizeof b, "  %-12s %6s %6s %8s %8s %8s %9s %9s %9s\n", "tier", "reqs", "ok", "errors", "degraded",
                "req/s", "tok/s", "goodput/s", "send lag p99");
  o << b;
  auto row = [&](const SliceStats& s) {
    std::snprintf(b, sizeof b, "  %-12s %6zu %6zu %8s %8s %8.2f %9.1f %9.2f %9s ms\n", s.tier.c_str(), s.n, s.n_ok,
                  pct(s.error_rate).c_str(), pct(s.degradation_rate).c_str(), s.rps, s.output_tok_s, s.goodput_rps,
                  num(s.send_lag_ms.p99).c_str());
    o << b;
  };
  for (const auto& t : p.tiers) row(t);
  if (p.tiers.size() != 1) row(p.overall);
  o << "\n";
  latency_table(o, "TTFT ms", p, &SliceStats::ttft_ms);
  latency_table(o, "ITL ms", p, &SliceStats::itl_ms);
  latency_table(o, "TPOT ms", p, &SliceStats::tpot_ms);
  latency_table(o, "E2E ms", p, &SliceStats::e2e_ms);
  latency_table(o, "queue ms (srv)", p, &SliceStats::queue_ms);
  if (!p.overall.errors.empty()) {
    o << "  errors:";
    for (const auto& [k, v] : p.overall.errors) o << " " << k << "=" << v;
    if (!p.overall.error_codes.empty()) {
      o << "  (codes:";
      for (const auto& [k, v] : p.overall.error_codes) o << " " << k << "=" << v;
      o << ")";
    }
    o << "\n";
  }
  for (const auto& t : p.tiers)
    if (t.n_degraded) {
      o << "  " << t.tier << " served as:";
      for (const auto& [k, v] : t.served) o << " " << k << "=" << v;
      o << "\n";
    }
  if (!std::isnan(p.ultrafast_standard_ttft_corr) || !std::isnan(p.ultrafast_standard_e2e_corr))
    o << "  ultrafast~standard correlation per " << num(p.bucket_s, "%g") << " s bucket: TTFT "
      << num(p.ultrafast_standard_ttft_corr, "%.2f") << ", E2E " << num(p.ultrafast_standard_e2e_corr, "%.2f")
      << " (near 1: a shared bottleneck)\n";
  if (price > 0) {
    o << "  cost at " << num(price, "%.2f") << "/instance-hour:\n";
    auto crow = [&](const SliceStats& s) {
      std::snprintf(b, sizeof b, "    %-12s %10s per 1k requests %10s per 1M output tokens (share %s)\n", s.tier.c_str(),
                    num(s.cost_per_1k_requests, "%.4f").c_str(), num(s.cost_per_1m_output_tokens, "%.4f").c_str(),
                    pct(s.cost_share).c_str());
      o << b;
    };
    for (const auto& t : p.tiers) crow(t);
    if (p.tiers.size() != 1) crow(p.overall);
  }
}

}  // namespace

std::string format_summary(const Report& r) {
  std::ostringstream o;
  o << "tierserve bench: " << r.target_url << "\n  load: " << r.mode << "\n  workload: " << r.workload
    << "\n  seed: " << r.seed << "\n";
  if (r.has_cold) {
    o << "cold start (first request, reported apart): ";
    if (r.cold.ok())
      o << "TTFT " << num(r.cold.ttft_ms()) << " ms, E2E " << num(r.cold.e2e_ms()) << " ms, " << r.cold.n_output_tokens
        << " tokens\n";
    else
      o << "error " << r.cold.error << " (" << r.cold.error_detail << ")\n";
  }
  if (r.n_warmup) o << "warm-up: " << r.n_warmup << " requests (" << r.n_warmup_errors << " errors), excluded\n";
  if (!r.sweep.empty()) {
    o << "\nsweep (" << r.sweep_unit << " -> throughput and P99 " << r.sweep_metric << "):\n";
    char b[200];
    std::snprintf(b, sizeof b, "  %10s %10s %10s %12s %12s %8s %s\n", r.sweep_unit.c_str(), "req/s", "tok/s",
                  ("p50 " + r.sweep_metric).c_str(), ("p99 " + r.sweep_metric).c_str(), "errors", "");
    o << b;
    for (size_t i = 0; i < r.sweep.size(); ++i) {
      const auto& s = r.sweep[i];
      const Summary& m = r.sweep_metric == "e2e" ? s.stats.overall.e2e_ms : s.stats.overall.ttft_ms;
      std::string mark;
      if (int(i) == r.knee_index) mark += " <- knee";
      if (r.slo_given) mark += s.slo_pass ? " SLO pass" : " SLO FAIL";
      std::snprintf(b, sizeof b, "  %10g %10.2f %10.1f %12s %12s %8s%s\n", s.offered, s.stats.overall.rps,
                    s.stats.overall.output_tok_s, num(m.p50).c_str(), num(m.p99).c_str(),
                    pct(s.stats.overall.error_rate).c_str(), mark.c_str());
      o << b;
    }
    if (r.knee_index < 0) o << "  knee: none (the curve never bends)\n";
    if (r.slo_given)
      o << "  highest " << r.sweep_unit << " meeting the SLOs: "
        << (std::isnan(r.max_rate_meeting_slo) ? std::string("none") : num(r.max_rate_meeting_slo, "%g")) << "\n";
    o << "\nat " << r.steady.phase << ":\n";
    phase_text(o, r.steady, r.price_per_hour);
  } else if (r.has_compare) {
    for (const auto* side : {&r.compare.a, &r.compare.b}) {
      o << "\n" << (side == &r.compare.a ? r.compare.label_a : r.compare.label_b) << " (steady, "
        << num(side->duration_s) << " s):\n";
      phase_text(o, *side, r.price_per_hour);
    }
    o << "\nratios " << r.compare.label_b << "/" << r.compare.label_a << " (overall):\n";
    const SliceStats &a = r.compare.a.overall, &b = r.compare.b.overall;
    auto ratio = [&](const char* name, double x, double y) {
      o << "  " << name << ": " << num(y / x, "%.3f") << "  (" << num(x, "%.2f") << " vs " << num(y, "%.2f") << ")\n";
    };
    ratio("throughput req/s", a.rps, b.rps);
    ratio("output tok/s", a.output_tok_s, b.output_tok_s);
    ratio("TTFT p50 ms", a.ttft_ms.p50, b.ttft_ms.p50);
    ratio("TTFT p99 ms", a.ttft_ms.p99, b.ttft_ms.p99);
    ratio("TPOT p50 ms", a.tpot_ms.p50, b.tpot_ms.p50);
    ratio("TPOT p99 ms", a.tpot_ms.p99, b.tpot_ms.p99);
    ratio("E2E p50 ms", a.e2e_ms.p50, b.e2e_ms.p50);
    ratio("E2E p99 ms", a.e2e_ms.p99, b.e2e_ms.p99);
    for (const SliceStats& ta : r.compare.a.tiers)
      for (const SliceStats& tb : r.compare.b.tiers) {
        if (ta.tier != tb.tier) continue;
        o << "ratios " << r.compare.label_b << "/" << r.compare.label_a << " (" << ta.tier << "):\n";
        ratio("TTFT p50 ms", ta.ttft_ms.p50, tb.ttft_ms.p50);
        ratio("TTFT p99 ms", ta.ttft_ms.p99, tb.ttft_ms.p99);
        ratio("TPOT p99 ms", ta.tpot_ms.p99, tb.tpot_ms.p99);
        ratio("E2E p99 ms", ta.e2e_ms.p99, tb.e2e_ms.p99);
      }
  } else {
    o << "\nsteady state: " << num(r.steady.duration_s) << " s, " << r.steady.overall.n << " requests\n";
    phase_text(o, r.steady, r.price_per_hour);
  }
  if (r.slo_given) {
    o << "\nSLO verdict:\n";
    for (const auto& v : r.verdicts) {
      o << "  " << (v.pass ? "PASS " : "FAIL ") << v.tier << (v.missing ? " (no requests of this tier)" : "") << "\n";
      for (const auto& x : v.results)
        o << "    " << (x.pass ? "ok   " : "FAIL ") << x.check.key << " = " << num(x.measured, "%.3f")
          << (x.check.at_least ? " >= " : " <= ") << num(x.check.limit, "%g") << "\n";
    }
    bool all = true;
    for (const auto& v : r.verdicts) all = all && v.pass;
    o << "  overall: " << (all ? "PASS" : "FAIL") << "\n";
  }
  return o.str();
}

std::string to_json(const Report& r) {
  json j;
  j["command_line"] = r.command_line;
  j["target"] = r.target_url;
  j["workload"] = r.workload;
  j["mode"] = r.mode;
  j["seed"] = r.seed;
  j["price_per_hour"] = r.price_per_hour;
  if (r.has_cold) j["cold_start"] = record_json(r.cold);
  j["warmup"] = {{"requests", r.n_warmup}, {"errors", r.n_warmup_errors}};
  j["steady"] = phase_json(r.steady);
  if (!r.sweep.empty()) {
    json steps = json::array();
    for (size_t i = 0; i < r.sweep.size(); ++i)
      steps.push_back({{"offered", r.sweep[i].offered},
                       {"slo_pass", r.sweep[i].slo_pass},
                       {"knee", int(i) == r.knee_index},
                       {"stats", phase_json(r.sweep[i].stats)}});
    j["sweep"] = {{"unit", r.sweep_unit},
                  {"metric", r.sweep_metric},
                  {"steps", steps},
                  {"knee_index", r.knee_index},
                  {"knee_offered", r.knee_index >= 0 ? json(r.sweep[size_t(r.knee_index)].offered) : json(nullptr)},
                  {"max_offered_meeting_slo", jnum(r.max_rate_meeting_slo)}};
  }
  if (r.has_compare) {
    const SliceStats &a = r.compare.a.overall, &b = r.compare.b.overall;
    j["compare"] = {{"a", {{"label", r.compare.label_a}, {"stats", phase_json(r.compare.a)}}},
                    {"b", {{"label", r.compare.label_b}, {"stats", phase_json(r.compare.b)}}},
                    {"ratio_b_over_a",
                     {{"throughput_rps", jnum(b.rps / a.rps)},
                      {"output_tok_s", jnum(b.output_tok_s / a.output_tok_s)},
                      {"ttft_p50", jnum(b.ttft_ms.p50 / a.ttft_ms.p50)},
                      {"ttft_p99", jnum(b.ttft_ms.p99 / a.ttft_ms.p99)},
                      {"tpot_p50", jnum(b.tpot_ms.p50 / a.tpot_ms.p50)},
                      {"tpot_p99", jnum(b.tpot_ms.p99 / a.tpot_ms.p99)},
                      {"e2e_p50", jnum(b.e2e_ms.p50 / a.e2e_ms.p50)},
                      {"e2e_p99", jnum(b.e2e_ms.p99 / a.e2e_ms.p99)}}}};
    json by_tier = json::object();
    for (const SliceStats& ta : r.compare.a.tiers)
      for (const SliceStats& tb : r.compare.b.tiers)
        if (ta.tier == tb.tier)
          by_tier[ta.tier] = {{"throughput_rps", jnum(tb.rps / ta.rps)},       {"ttft_p50", jnum(tb.ttft_ms.p50 / ta.ttft_ms.p50)},
                              {"ttft_p99", jnum(tb.ttft_ms.p99 / ta.ttft_ms.p99)}, {"tpot_p99", jnum(tb.tpot_ms.p99 / ta.tpot_ms.p99)},
                              {"e2e_p99", jnum(tb.e2e_ms.p99 / ta.e2e_ms.p99)},    {"error_rate_a", jnum(ta.n ? double(ta.n_errors) / double(ta.n) : NAN)},
                              {"error_rate_b", jnum(tb.n ? double(tb.n_errors) / double(tb.n) : NAN)}};
    j["compare"]["ratio_b_over_a_by_tier"] = by_tier;
  }
  if (r.slo_given) {
    json v = json::array();
    bool all = true;
    for (const auto& t : r.verdicts) {
      json checks = json::array();
      for (const auto& x : t.results)
        checks.push_back({{"key", x.check.key},
                          {"op", x.check.at_least ? ">=" : "<="},
                          {"limit", x.check.limit},
                          {"measured", jnum(x.measured)},
                          {"pass", x.pass}});
      v.push_back({{"tier", t.tier}, {"pass", t.pass}, {"missing", t.missing}, {"checks", checks}});
      all = all && t.pass;
    }
    j["slo"] = {{"pass", all}, {"tiers", v}};
  }
  return j.dump(2) + "\n";
}

std::string to_csv(const Report& r) {
  std::ostringstream o;
  o << "phase,target,offered,tier,requests,ok,errors,error_rate,degradation_rate,throughput_rps,output_tok_s,goodput_rps";
  for (const char* m : {"ttft", "itl", "tpot", "e2e", "queue"})
    for (const char* s : {"min", "p50", "p90", "p95", "p99", "p99.9", "max", "mean"}) o << "," << m << "_" << s << "_ms";
  o << ",send_lag_p99_ms,cost_per_1k_requests,cost_per_1m_output_tokens\n";
  auto csvnum = [](double v) { return std::isnan(v) ? std::string() : num(v, "%.6g"); };
  auto rows = [&](const PhaseStats& p, const std::string& target, double offered) {
    std::vector<const SliceStats*> slices;
    for (const auto& t : p.tiers) slices.push_back(&t);
    slices.push_back(&p.overall);
    for (const SliceStats* s : slices) {
      o << p.phase << "," << target << "," << csvnum(offered) << "," << s->tier << "," << s->n << "," << s->n_ok << ","
        << s->n_errors << "," << csvnum(s->error_rate) << "," << csvnum(s->degradation_rate) << "," << csvnum(s->rps)
        << "," << csvnum(s->output_tok_s) << "," << csvnum(s->goodput_rps);
      for (const Summary* m : {&s->ttft_ms, &s->itl_ms, &s->tpot_ms, &s->e2e_ms, &s->queue_ms})
        for (const char* k : {"min", "p50", "p90", "p95", "p99", "p99.9", "max", "mean"}) o << "," << csvnum(m->get(k));
      o << "," << csvnum(s->send_lag_ms.p99) << "," << csvnum(s->cost_per_1k_requests) << ","
        << csvnum(s->cost_per_1m_output_tokens) << "\n";
    }
  };
  if (!r.sweep.empty()) {
    for (const auto& s : r.sweep) rows(s.stats, "", s.offered);
  } else if (r.has_compare) {
    rows(r.compare.a, r.compare.label_a, NAN);
    rows(r.compare.b, r.compare.label_b, NAN);
  } else {
    rows(r.steady, "", NAN);
  }
  return o.str();
}

std::string to_jsonl(const std::vector<RequestRecord>& recs) {
  std::string out;
  for (const auto& r : recs) out += record_json(r).dump() + "\n";
  return out;
}

}  // namespace ts::bench
