// "Reserve first, then share, then lend": how one step's capacity (tokens, or KV blocks)
// is split between tiers. A pure function, so the rule is testable on its own.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ts::sched {

struct ShareInput {
  int64_t demand = 0;  // units the tier could use now
  int64_t floor = 0;   // reserved while it has demand
  int64_t cap = 0;     // not exceeded in the sharing pass (>= floor)
  bool borrow = false; // may take what is left after every tier's capped demand
};

// `tiers` in priority order (highest first). Returns each tier's grant:
//   1. reserve min(floor, demand) for every tier;
//   2. in priority order, raise each grant towards min(demand, cap) from what is left;
//   3. in priority order, tiers that borrow take what is still left, up to their demand.
// Guarantees: grant <= demand; sum <= capacity; grant >= min(floor, demand) whenever the
// floors fit the capacity (validated configs: sum of share_min <= 1); grant <= max(cap,
// floor) for tiers that do not borrow.
std::vector<int64_t> allocate_shares(int64_t capacity, std::span<const ShareInput> tiers);

// A share of `total` in whole units, rounded down (so floors never add up past total).
int64_t share_units(double share, int64_t total);

}  // namespace ts::sched
