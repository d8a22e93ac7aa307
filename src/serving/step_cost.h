// The step cost model of this machine (sched/step_cost.h), measured on the engine itself:
// a calibration at start-up (Service::create), the step budget derived from it, and the
// online correction from the steps the loop runs. Private to the serving layer.
#pragma once

#include <cstdint>

#include "engine/engine.h"
#include "sched/step_cost.h"

namespace ts::serving {

// Times a few steps of scratch sequences (a short and a long prompt chunk, a step of
// single-token sequences, short chunks after a context of 256), best of three each, and
// solves the linear model. The sequences
// are removed and the prefix cache cleared afterwards. Unmeasured (token_ns 0) when the
// engine refuses the steps (a KV cache too small for them).
sched::StepCost measure_step_cost(engine::Engine& engine, int32_t n_layers, int64_t n_vocab);

// The largest power of two in [16, 512] (and at most max_step_tokens) whose one layer of a
// full step takes at most max_segment_ms: the step budget that keeps an interrupting
// tier's wait for the step in flight that short. 64 when the cost is unmeasured.
int64_t derive_step_budget(const sched::StepCost& c, double max_segment_ms, int64_t max_step_tokens);

// A latency tier's burst (sched::TierConfig::burst_tokens -1): the prompt tokens one step
// computes in max_queue_wait_ms beyond the budget, so that one exclusive step of the tier
// never holds its next request past its max wait; at least the budget, at most 2048. 512
// when the cost is unmeasured.
int64_t derive_burst_tokens(const sched::StepCost& c, int64_t max_queue_wait_ms, int64_t budget);

// Steps of the loop correct the calibration for what the machine does now (other load,
// longer contexts): an exponentially weighted ratio of measured to predicted step times.
class StepCostTracker {
 public:
  explicit StepCostTracker(const sched::StepCost& base) : base_(base) {}
  // A completed (not interrupted) step of n_tokens (with n_pairs attention pairs) and
  // n_outputs that took time_ns.
  void observe(int64_t n_tokens, int64_t n_outputs, double n_pairs, int64_t time_ns);
  sched::StepCost current() const { return base_.scaled(scale_); }
  double scale() const { return scale_; }

 private:
  sched::StepCost base_;
  double scale_ = 1.0;
};

}  // namespace ts::serving
