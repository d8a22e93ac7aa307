// Arrival schedules for open-loop load: when each request is due, decided before the
// run from a seed, so a run is reproducible and the schedule never bends to the server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace ts::bench {

enum class ArrivalKind {
  kConstant,  // evenly spaced, 1/rate apart
  kPoisson,   // exponential gaps (coefficient of variation 1)
  kGamma,     // gamma gaps with a chosen coefficient of variation: >1 bursty, <1 smooth
};

struct ArrivalSpec {
  ArrivalKind kind = ArrivalKind::kPoisson;
  double rate_rps = 1;   // mean arrival rate once ramped up
  double cv = 1;         // gap coefficient of variation (kGamma only)
  double ramp_s = 0;     // the rate rises linearly from 0 to rate_rps over this time
};

// Parses "constant", "poisson" or "gamma".
Result<ArrivalKind> parse_arrival_kind(const std::string& s);
const char* arrival_kind_name(ArrivalKind k);

// Send offsets in ns from the start of the schedule, ascending: at most `max_n`
// arrivals, and only those before `max_duration_ns` (0 = no time limit; at least one
// limit must be set). Arrivals are drawn as a unit-rate renewal process (gaps of 1,
// Exp(1) or Gamma(1/cv^2, cv^2)) in "operational time" and mapped through the inverse
// of the cumulative rate, which is how the linear ramp is applied without thinning.
std::vector<int64_t> arrival_schedule(const ArrivalSpec& spec, size_t max_n,
                                      int64_t max_duration_ns, Rng& rng);

// Samplers used above, exposed for tests. Marsaglia-Tsang for the gamma.
double sample_exponential(Rng& rng);
double sample_gamma(Rng& rng, double shape);
double sample_normal(Rng& rng);

}  // namespace ts::bench
