#include "service_metrics.h"

#include "metrics/tierserve_metrics.h"

namespace ts::serving {

using metrics::idx;
using metrics::Metric;

namespace {
double seconds(int64_t ns) { return double(ns) * 1e-9; }
}  // namespace

ServiceMetrics::ServiceMetrics(metrics::Registry* reg, const std::vector<std::string>& tiers) : reg_(reg), names_(tiers) {
  tiers_.resize(tiers.size());
  if (!reg_) return;
  for (size_t i = 0; i < tiers.size(); ++i) {
    Tier& t = tiers_[i];
    const std::vector<std::string> l = {tiers[i]};
    t.queue = reg_->histogram(idx(Metric::kQueueTime), l);
    t.ttft = reg_->histogram(idx(Metric::kTimeToFirstToken), l);
    t.tpot = reg_->histogram(idx(Metric::kTimePerOutputToken), l);
    t.duration = reg_->histogram(idx(Metric::kRequestDuration), l);
    for (size_t o = 0; o < size_t(Outcome::kCount); ++o)
      t.outcome[o] = reg_->counter(idx(Metric::kRequests), {tiers[i], metrics::kOutcomes[o]});
    t.in = reg_->counter(idx(Metric::kTokens), {tiers[i], "in"});
    t.out = reg_->counter(idx(Metric::kTokens), {tiers[i], "out"});
    t.queued = reg_->gauge(idx(Metric::kQueuedRequests), l);
    t.running = reg_->gauge(idx(Metric::kRunningRequests), l);
    t.kv = reg_->gauge(idx(Metric::kKvBlocksUsed), l);
    t.share = reg_->gauge(idx(Metric::kStepBudgetShare), l);
    t.drafted = reg_->counter(idx(Metric::kSpeculativeTokens), {tiers[i], "drafted"});
    t.accepted = reg_->counter(idx(Metric::kSpeculativeTokens), {tiers[i], "accepted"});
  }
  inversions_ = reg_->counter(idx(Metric::kPriorityInversions));
  interrupted_ = reg_->counter(idx(Metric::kStepsInterrupted));
  correlation_ = reg_->gauge(idx(Metric::kLatencyCorrelation));
  forced_ = reg_->counter(idx(Metric::kStepsForcedExclusive));
  prefix_queries_ = reg_->counter(idx(Metric::kPrefixCacheQueries));
  prefix_hits_ = reg_->counter(idx(Metric::kPrefixCacheHits));
  bounds_.assign(tiers.size(), nullptr);
  const char* parts[] = {"fixed", "token", "output"};
  for (int i = 0; i < 3; ++i) cost_[i] = reg_->gauge(idx(Metric::kStepCost), {parts[i]});
}

void ServiceMetrics::request(int tier, Outcome o) {
  if (reg_) tiers_[size_t(tier)].outcome[size_t(o)]->inc();
}

void ServiceMetrics::tokens_in(int tier, int64_t n) {
  if (reg_ && n > 0) tiers_[size_t(tier)].in->inc(uint64_t(n));
}

void ServiceMetrics::tokens_out(int tier, int64_t n) {
  if (reg_ && n > 0) tiers_[size_t(tier)].out->inc(uint64_t(n));
}

void ServiceMetrics::degradation(int requested, int served, sched::Reason reason) {
  if (!reg_) return;
  const auto key = std::make_tuple(requested, served, reason);
  auto it = degradations_.find(key);
  if (it == degradations_.end()) {  // rare: the registry's mutex only on a new label set
    const char* why = reason == sched::Reason::kNone ? "" : sched::reason_name(reason);
    it = degradations_
             .emplace(key, reg_->counter(idx(Metric::kDegradations),
                                         {names_[size_t(requested)], served < 0 ? "none" : names_[size_t(served)], why}))
             .first;
  }
  it->second->inc();
}

void ServiceMetrics::queue_time(int tier, int64_t ns) {
  if (reg_) tiers_[size_t(tier)].queue->observe(seconds(ns));
}

void ServiceMetrics::ttft(int tier, int64_t ns) {
  if (!reg_) return;
  tiers_[size_t(tier)].ttft->observe(seconds(ns));
  // Time to first token is where a shared bottleneck shows first (queueing + prefill).
  if (tier == 0) corr_.record_fast(seconds(ns));
  else if (tier == 1) corr_.record_standard(seconds(ns));
}

void ServiceMetrics::tpot(int tier, int64_t ns_per_token) {
  if (reg_) tiers_[size_t(tier)].tpot->observe(seconds(ns_per_token));
}

void ServiceMetrics::duration(int tier, int64_t ns) {
  if (reg_) tiers_[size_t(tier)].duration->observe(seconds(ns));
}

void ServiceMetrics::tier_gauges(int tier, int64_t n_queued, int64_t n_running, int64_t kv_blocks,
                                 std::optional<double> share) {
  if (!reg_) return;
  Tier& t = tiers_[size_t(tier)];
  t.queued->set(double(n_queued));
  t.running->set(double(n_running));
  t.kv->set(double(kv_blocks));
  if (share) t.share->set(*share);
}

void ServiceMetrics::priority_inversions(int64_t n) {
  if (reg_ && n > 0) inversions_->inc(uint64_t(n));
}

void ServiceMetrics::speculative(int tier, int64_t drafted, int64_t accepted) {
  if (!reg_) return;
  tiers_[size_t(tier)].drafted->inc(uint64_t(drafted));
  tiers_[size_t(tier)].accepted->inc(uint64_t(accepted));
}

void ServiceMetrics::step_interrupted() {
  if (reg_) interrupted_->inc();
}

void ServiceMetrics::prefix_cache(int64_t queried, int64_t hit) {
  if (!reg_) return;
  if (queried > 0) prefix_queries_->inc(uint64_t(queried));
  if (hit > 0) prefix_hits_->inc(uint64_t(hit));
}

void ServiceMetrics::step_forced_exclusive() {
  if (reg_) forced_->inc();
}

void ServiceMetrics::wait_bound(int tier, int64_t ns) {
  if (!reg_) return;
  // Only interrupting tiers have a bound: their series exist once one is set.
  if (!bounds_[size_t(tier)]) bounds_[size_t(tier)] = reg_->gauge(idx(Metric::kWaitBound), {names_[size_t(tier)]});
  bounds_[size_t(tier)]->set(double(ns) / 1e9);
}

void ServiceMetrics::step_cost(double fixed_ns, double token_ns, double output_ns) {
  if (!reg_) return;
  cost_[0]->set(fixed_ns / 1e9);
  cost_[1]->set(token_ns / 1e9);
  cost_[2]->set(output_ns / 1e9);
}

void ServiceMetrics::tick(int64_t now_ns, int64_t interval_ns) {
  if (!reg_) return;
  if (last_tick_ns_ < 0) last_tick_ns_ = now_ns;
  if (now_ns - last_tick_ns_ < interval_ns) return;
  last_tick_ns_ = now_ns;
  if (auto c = corr_.close_interval()) correlation_->set(*c);
}

}  // namespace ts::serving
