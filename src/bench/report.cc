// Aggregation: request records -> per-tier and overall statistics.
#include <algorithm>
#include <cmath>
#include <map>

#include "bench/cost.h"
#include "bench/report.h"

namespace ts::bench {

namespace {

std::string tier_label(const RequestRecord& r) { return r.tier_requested.empty() ? "default" : r.tier_requested; }

int tier_rank(const std::string& t) {
  if (t == "ultrafast") return 0;
  if (t == "standard") return 1;
  if (t == "batch") return 2;
  if (t == "default") return 4;
  return 3;
}

SliceStats slice(const std::vector<const RequestRecord*>& recs, const std::string& name, double duration_s,
                 const SloSpec* slo) {
  SliceStats s;
  s.tier = name;
  s.n = recs.size();
  s.duration_s = duration_s;
  std::vector<double> ttft, itl, tpot, e2e, queue, lag;
  for (const RequestRecord* r : recs) {
    lag.push_back(r->send_lag_ms());
    if (!r->ok()) {
      ++s.n_errors;
      ++s.errors[r->error];
      if (!r->error_code.empty()) ++s.error_codes[r->error + ":" + r->error_code];
      continue;
    }
    ++s.n_ok;
    if (r->degraded()) ++s.n_degraded;
    if (!r->tier_served.empty()) ++s.served[r->tier_served];
    s.output_tokens += r->n_output_tokens;
    ttft.push_back(r->ttft_ms());
    tpot.push_back(r->tpot_ms());
    e2e.push_back(r->e2e_ms());
    queue.push_back(r->server_queue_ms);
    double worst_itl = NAN;
    for (size_t i = 1; i < r->token_ns.size(); ++i) {
      const double gap = double(r->token_ns[i] - r->token_ns[i - 1]) / 1e6;
      itl.push_back(gap);
      worst_itl = std::isnan(worst_itl) ? gap : std::max(worst_itl, gap);
    }
    // Goodput: a request is good when it meets every per-request latency limit of its
    // tier's SLO (a P99 limit read as "this request must be within it").
    bool good = true;
    if (slo) {
      const auto lim = slo->request_limits(tier_label(*r));
      auto within = [](double v, double limit) { return std::isnan(limit) || (!std::isnan(v) && v <= limit); };
      good = within(r->ttft_ms(), lim.ttft_ms) && within(r->e2e_ms(), lim.e2e_ms) &&
             (std::isnan(lim.tpot_ms) || std::isnan(r->tpot_ms()) || r->tpot_ms() <= lim.tpot_ms) &&
             (std::isnan(lim.itl_ms) || std::isnan(worst_itl) || worst_itl <= lim.itl_ms);
    }
    if (good) ++s.n_good;
  }
  s.ttft_ms = summarize(std::move(ttft));
  s.itl_ms = summarize(std::move(itl));
  s.tpot_ms = summarize(std::move(tpot));
  s.e2e_ms = summarize(std::move(e2e));
  s.queue_ms = summarize(std::move(queue));
  s.send_lag_ms = summarize(std::move(lag));
  if (duration_s > 0) {
    s.rps = double(s.n_ok) / duration_s;
    s.output_tok_s = double(s.output_tokens) / duration_s;
    s.goodput_rps = double(s.n_good) / duration_s;
  }
  s.error_rate = s.n ? double(s.n_errors) / double(s.n) : NAN;
  s.degradation_rate = s.n_ok ? double(s.n_degraded) / double(s.n_ok) : NAN;
  return s;
}

}  // namespace

PhaseStats aggregate(const std::vector<RequestRecord>& recs, const std::string& phase, const AggregateOptions& opt,
                     double duration_s_override) {
  PhaseStats p;
  p.phase = phase;
  p.bucket_s = opt.bucket_s;
  int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  for (const auto& r : recs) {
    t0 = std::min(t0, r.scheduled_ns);
    t1 = std::max(t1, r.end_ns);
  }
  p.duration_s = duration_s_override > 0 ? duration_s_override : recs.empty() ? 0 : double(t1 - t0) / 1e9;

  std::vector<const RequestRecord*> all;
  std::map<std::string, std::vector<const RequestRecord*>> by_tier;
  for (const auto& r : recs) {
    all.push_back(&r);
    by_tier[tier_label(r)].push_back(&r);
  }
  p.overall = slice(all, "overall", p.duration_s, opt.slo);
  for (auto& [name, v] : by_tier) p.tiers.push_back(slice(v, name, p.duration_s, opt.slo));
  std::stable_sort(p.tiers.begin(), p.tiers.end(), [](const SliceStats& a, const SliceStats& b) {
    return tier_rank(a.tier) != tier_rank(b.tier) ? tier_rank(a.tier) < tier_rank(b.tier) : a.tier < b.tier;
  });

  if (opt.price_per_hour > 0) {
    Cost c = cost_at_throughput({opt.price_per_hour, p.overall.rps, p.overall.output_tok_s});
    p.overall.cost_per_1k_requests = c.per_1k_requests;
    p.overall.cost_per_1m_output_tokens = c.per_1m_output_tokens;
    p.overall.cost_share = 1;
    for (auto& t : p.tiers) {
      t.cost_share = tier_cost_share(double(t.output_tokens), double(p.overall.output_tokens), double(t.n_ok),
                                     double(p.overall.n_ok));
      Cost tc = tier_cost(opt.price_per_hour, t.cost_share, t.rps, t.output_tok_s);
      t.cost_per_1k_requests = tc.per_1k_requests;
      t.cost_per_1m_output_tokens = tc.per_1m_output_tokens;
    }
  }

  // Latency over time: mean per bucket of scheduled time, per tier.
  if (!recs.empty() && opt.bucket_s > 0) {
    const size_t n_buckets = size_t(std::floor(double(t1 - t0) / 1e9 / opt.bucket_s)) + 1;
    for (const auto& t : p.tiers) {
      TimeSeries ts;
      ts.tier = t.tier;
      std::vector<double> sum_ttft(n_buckets, 0), sum_e2e(n_buckets, 0);
      std::vector<int> n_ttft(n_buckets, 0), n_e2e(n_buckets, 0);
      for (const RequestRecord* r : by_tier[t.tier]) {
        if (!r->ok()) continue;
        const size_t b = std::min(n_buckets - 1, size_t(double(r->scheduled_ns - t0) / 1e9 / opt.bucket_s));
        if (!std::isnan(r->ttft_ms())) {
          sum_ttft[b] += r->ttft_ms();
          ++n_ttft[b];
        }
        sum_e2e[b] += r->e2e_ms();
        ++n_e2e[b];
      }
      for (size_t b = 0; b < n_buckets; ++b) {
        ts.t_s.push_back(double(b) * opt.bucket_s);
        ts.ttft_ms.push_back(n_ttft[b] ? sum_ttft[b] / n_ttft[b] : NAN);
        ts.e2e_ms.push_back(n_e2e[b] ? sum_e2e[b] / n_e2e[b] : NAN);
      }
      p.series.push_back(std::move(ts));
    }
    const TimeSeries *uf = nullptr, *st = nullptr;
    for (const auto& s : p.series) {
      if (s.tier == "ultrafast") uf = &s;
      if (s.tier == "standard") st = &s;
    }
    if (uf && st) {
      auto corr = [&](const std::vector<double>& a, const std::vector<double>& b) {
        std::vector<double> x, y;
        for (size_t i = 0; i < a.size(); ++i)
          if (!std::isnan(a[i]) && !std::isnan(b[i])) {
            x.push_back(a[i]);
            y.push_back(b[i]);
          }
        // Fewer than 5 common buckets make r meaningless (3 points fit almost any line).
        return x.size() >= 5 ? pearson(x, y) : NAN;
      };
      p.ultrafast_standard_ttft_corr = corr(uf->ttft_ms, st->ttft_ms);
      p.ultrafast_standard_e2e_corr = corr(uf->e2e_ms, st->e2e_ms);
    }
  }
  return p;
}

const SliceStats* PhaseMetricSource::find(const std::string& tier) const {
  if (tier == "overall") return &p_.overall;
  for (const auto& t : p_.tiers)
    if (t.tier == tier) return &t;
  return nullptr;
}

bool PhaseMetricSource::has_tier(const std::string& tier) const { return find(tier) != nullptr; }

double PhaseMetricSource::value(const std::string& tier, const std::string& metric, const std::string& stat) const {
  const SliceStats* s = find(tier);
  if (!s) return NAN;
  if (metric == "error_rate") return s->error_rate;
  if (metric == "degradation_rate") return s->degradation_rate;
  if (metric == "throughput_rps") return s->rps;
  if (metric == "output_tok_s") return s->output_tok_s;
  if (metric == "goodput_rps") return s->goodput_rps;
  const Summary* sum = metric == "ttft"    ? &s->ttft_ms
                       : metric == "itl"   ? &s->itl_ms
                       : metric == "tpot"  ? &s->tpot_ms
                       : metric == "e2e"   ? &s->e2e_ms
                       : metric == "queue" ? &s->queue_ms
                                           : nullptr;
  return sum ? sum->get(stat.c_str()) : NAN;
}

std::vector<CurvePoint> sweep_curve(const Report& r) {
  std::vector<CurvePoint> c;
  for (const auto& s : r.sweep) {
    const Summary& m = r.sweep_metric == "e2e" ? s.stats.overall.e2e_ms : s.stats.overall.ttft_ms;
    c.push_back({s.offered, s.stats.overall.rps, m.p99});
  }
  return c;
}

}  // namespace ts::bench
