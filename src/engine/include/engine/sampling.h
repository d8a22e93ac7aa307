// Token sampling: a pure, seeded function of the logits and the tokens seen so far.
//
// The pipeline follows llama.cpp's default order so the same settings mean the same thing:
//   logit bias -> penalties (repetition, frequency, presence over the last penalty_last_n
//   tokens) -> top-k -> top-p -> min-p -> temperature -> draw from the softmax.
// temperature <= 0 is greedy: the highest logit after bias and penalties (lowest id on
// ties).
#pragma once

#include "engine/step.h"
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/status.h"

namespace ts::engine {

struct SamplingParams {
  float temperature = 0.0f;       // <= 0: greedy
  int32_t top_k = 0;              // <= 0: off
  float top_p = 1.0f;             // 1: off; 0: the most probable token only
  float min_p = 0.0f;             // 0: off
  float repeat_penalty = 1.0f;    // 1: off; logit / p when > 0, logit * p otherwise
  float frequency_penalty = 0.0f; // logit -= count * f
  float presence_penalty = 0.0f;  // logit -= (count > 0) * p
  int32_t penalty_last_n = 64;    // tokens of history the penalties look at (0: none)
  uint64_t seed = 0;
  // (token id, finite bias) added to the logits before anything else (OpenAI's
  // logit_bias: -100 in effect bans a token). Ids past the vocabulary are the caller's to
  // refuse (the sampler skips them).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// kInvalidArgument naming the parameter when a value is out of range or NaN.
Status validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);

  // The next token given n_vocab logits. Does not record it: call accept().
  int32_t sample(std::span<const float> logits);
  // Records a token (prompt or generated) for the penalties.
  void accept(int32_t token);
  // Forgets the history and reseeds.
  void reset();

  const SamplingParams& params() const { return p_; }

 private:
  void apply_penalties(std::vector<float>& logits);
  void apply_bias(std::vector<float>& logits) const;
  // Draw from the softmax at the sampling temperature over the whole vocabulary in id
  // order, tokens below `cut` excluded (min-p).
  int32_t draw_all(std::span<const float> w, float mx, float cut);
  // The candidates of top-k and top-p in order (logit descending, id ascending), in the
  // thread's scratch (sampling.cc); the return value is how many are kept.
  size_t ordered_candidates(std::span<const float> w, float mx);

  SamplingParams p_;
  Rng rng_;
  std::vector<int32_t> history_;  // most recent last, at most penalty_last_n
};

// Index of the largest value (first on ties); -1 for an empty span.
int32_t argmax(std::span<const float> v);

// log softmax(row)[token] in double, and the n_top most likely tokens (highest first, ties
// by id) with theirs.
OutputLogprob output_logprob(std::span<const float> row, int32_t token, int32_t n_top);

}  // namespace ts::engine
