#include "bench/cost.h"

#include <cmath>

namespace ts::bench {

Cost cost_at_throughput(const CostInput& in) {
  Cost c;
  const double per_s = in.price_per_hour / 3600.0;
  c.per_1k_requests = in.requests_per_s > 0 ? per_s / in.requests_per_s * 1000.0 : NAN;
  c.per_1m_output_tokens = in.output_tokens_per_s > 0 ? per_s / in.output_tokens_per_s * 1e6 : NAN;
  return c;
}

double tier_cost_share(double tier_tokens, double total_tokens, double tier_requests,
                       double total_requests) {
  if (total_tokens > 0) return tier_tokens / total_tokens;
  if (total_requests > 0) return tier_requests / total_requests;
  return NAN;
}

Cost tier_cost(double price_per_hour, double share, double tier_requests_per_s,
               double tier_output_tokens_per_s) {
  return cost_at_throughput({price_per_hour * share, tier_requests_per_s, tier_output_tokens_per_s});
}

}  // namespace ts::bench
