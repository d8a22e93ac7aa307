#include "bench/arrival.h"

#include <cmath>

namespace ts::bench {

Result<ArrivalKind> parse_arrival_kind(const std::string& s) {
  if (s == "constant") return ArrivalKind::kConstant;
  if (s == "poisson") return ArrivalKind::kPoisson;
  if (s == "gamma") return ArrivalKind::kGamma;
  return invalid_argument("unknown arrival process '" + s + "' (constant, poisson, gamma)");
}

const char* arrival_kind_name(ArrivalKind k) {
  switch (k) {
    case ArrivalKind::kConstant: return "constant";
    case ArrivalKind::kPoisson: return "poisson";
    case ArrivalKind::kGamma: return "gamma";
  }
  return "?";
}

double sample_exponential(Rng& rng) {
  // 1 - u is in (0, 1], so the log is finite.
  return -std::log(1.0 - rng.uniform());
}

double sample_normal(Rng& rng) {
  // Box-Muller in double precision (Rng::normal is float).
  const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double sample_gamma(Rng& rng, double shape) {
  if (shape < 1.0) {
    // Boost a shape < 1 by sampling shape + 1 and scaling by U^(1/shape).
    const double u = 1.0 - rng.uniform();
    return sample_gamma(rng, shape + 1.0) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = sample_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - rng.uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

namespace {

// Maps operational time (expected arrivals so far) to seconds for a rate that rises
// linearly from 0 to `rate` over `ramp` seconds and then stays.
double op_to_seconds(double lambda, double rate, double ramp) {
  if (ramp <= 0) return lambda / rate;
  const double ramp_arrivals = rate * ramp / 2.0;
  if (lambda < ramp_arrivals) return std::sqrt(2.0 * ramp * lambda / rate);
  return ramp + (lambda - ramp_arrivals) / rate;
}

}  // namespace

std::vector<int64_t> arrival_schedule(const ArrivalSpec& spec, size_t max_n,
                                      int64_t max_duration_ns, Rng& rng) {
  std::vector<int64_t> out;
  if (!(spec.rate_rps > 0) || (max_n == 0 && max_duration_ns <= 0)) return out;
  const double shape = spec.kind == ArrivalKind::kGamma ? 1.0 / (spec.cv * spec.cv) : 1.0;
  // A constant schedule sends its first request at t = 0; random ones wait a first gap
  // like every other (the process has no reason to fire at exactly 0).
  double lambda = 0;
  bool first = true;
  for (;;) {
    if (max_n && out.size() >= max_n) break;
    double gap = 1.0;
    switch (spec.kind) {
      case ArrivalKind::kConstant: gap = first ? 0.0 : 1.0; break;
      case ArrivalKind::kPoisson: gap = sample_exponential(rng); break;
      case ArrivalKind::kGamma: gap = sample_gamma(rng, shape) / shape; break;
    }
    first = false;
    lambda += gap;
    const double t_s = op_to_seconds(lambda, spec.rate_rps, spec.ramp_s);
    const int64_t t_ns = int64_t(std::llround(t_s * 1e9));
    if (max_duration_ns > 0 && t_ns >= max_duration_ns) break;
    out.push_back(t_ns);
  }
  return out;
}

}  // namespace ts::bench
