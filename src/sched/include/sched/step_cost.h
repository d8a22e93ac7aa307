// What an engine step costs in time on this machine: a linear model of its shape, measured
// by the serving layer (a calibration at start-up, then kept current from the steps it
// runs) and handed to the scheduler, which bounds and predicts the fast tier's waits with
// it. Plain data; the scheduler never measures time itself.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ts::sched {

struct StepCost {
  double fixed_ns = 0;   // per step
  double token_ns = 0;   // per token computed (its pass through every layer)
  double output_ns = 0;  // per output row: the output projection over the vocabulary
  double pair_ns = 0;    // per (token, earlier position) pair: attention over the context
  int32_t n_layers = 1;  // an interruptible step can be abandoned before each layer and
                         // before the output projection (engine::StepPlan::interruptible)

  bool measured() const { return token_ns > 0; }

  // The attention pairs of n tokens computed after `context` tokens.
  static double pairs(int64_t n, int64_t context) { return double(n) * (double(context) + double(n + 1) / 2.0); }

  double step_ns(int64_t n_tokens, int64_t n_outputs, double n_pairs = 0) const {
    return fixed_ns + token_ns * double(n_tokens) + output_ns * double(n_outputs) + pair_ns * n_pairs;
  }
  // n tokens of one sequence after `context` (its share of a step, without the fixed part).
  double tokens_ns(int64_t n, int64_t context) const { return token_ns * double(n) + pair_ns * pairs(n, context); }
  // The longest stretch of such a step that nothing can interrupt: one layer of all its
  // tokens, or its output projection. A request of an interrupting tier that arrives
  // while the step runs waits at most this long for it.
  double segment_ns(int64_t n_tokens, int64_t n_outputs, double n_pairs = 0) const {
    return std::max((fixed_ns + token_ns * double(n_tokens) + pair_ns * n_pairs) / double(std::max(1, n_layers)),
                    output_ns * double(n_outputs));
  }
  // The same model with every cost multiplied by `s` (the machine measured slower or
  // faster than at calibration).
  StepCost scaled(double s) const {
    StepCost c = *this;
    c.fixed_ns *= s;
    c.token_ns *= s;
    c.output_ns *= s;
    c.pair_ns *= s;
    return c;
  }
};

}  // namespace ts::sched
