#include "sched/shares.h"

#include <algorithm>
#include <cmath>

namespace ts::sched {

int64_t share_units(double share, int64_t total) {
  // The epsilon keeps 0.3 x 10 at 3 despite 0.3 not being exact in binary.
  return std::clamp<int64_t>(int64_t(std::floor(share * double(total) + 1e-9)), 0, total);
}

std::vector<int64_t> allocate_shares(int64_t capacity, std::span<const ShareInput> tiers) {
  std::vector<int64_t> grant(tiers.size(), 0);
  int64_t left = std::max<int64_t>(capacity, 0);
  for (size_t i = 0; i < tiers.size(); ++i) {
    const int64_t g = std::min({tiers[i].floor, tiers[i].demand, left});
    grant[i] = std::max<int64_t>(g, 0);
    left -= grant[i];
  }
  for (size_t i = 0; i < tiers.size() && left > 0; ++i) {
    const int64_t want = std::min(tiers[i].demand, std::max(tiers[i].cap, tiers[i].floor)) - grant[i];
    const int64_t g = std::clamp<int64_t>(want, 0, left);
    grant[i] += g;
    left -= g;
  }
  for (size_t i = 0; i < tiers.size() && left > 0; ++i) {
    if (!tiers[i].borrow) continue;
    const int64_t g = std::clamp<int64_t>(tiers[i].demand - grant[i], 0, left);
    grant[i] += g;
    left -= g;
  }
  return grant;
}

}  // namespace ts::sched
