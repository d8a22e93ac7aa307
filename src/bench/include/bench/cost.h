// Cost arithmetic: from a price per instance-hour and a measured throughput to cost per
// 1000 requests and per million output tokens.
#pragma once

namespace ts::bench {

struct CostInput {
  double price_per_hour = 0;  // what one instance (the server under test) costs
  double requests_per_s = 0;  // measured throughput of the slice being costed
  double output_tokens_per_s = 0;
};

struct Cost {
  double per_1k_requests = 0;        // NaN when the throughput is zero
  double per_1m_output_tokens = 0;   // NaN when no tokens were produced
};

// Cost when the instance is fully paid for by this throughput:
// per_1k_requests = price_per_hour / (requests_per_s * 3600) * 1000.
Cost cost_at_throughput(const CostInput& in);

// The share of the instance a tier pays for: its fraction of the output tokens (tokens
// are what occupies the engine), or of the requests when no tokens were counted at all.
double tier_cost_share(double tier_tokens, double total_tokens, double tier_requests,
                       double total_requests);

// A tier's cost when it pays `share` of the instance-hour and achieved the given
// per-tier throughput: price_per_hour * share over that tier's own rates.
Cost tier_cost(double price_per_hour, double share, double tier_requests_per_s,
               double tier_output_tokens_per_s);

}  // namespace ts::bench
