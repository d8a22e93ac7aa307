#include "engine/sampling.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ts::engine {

Status validate(const SamplingParams& p) {
  auto bad = [](const char* name, double v, const char* want) {
    return invalid_argument(std::string(name) + " = " + std::to_string(v) + ": " + want);
  };
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f)
    return bad("temperature", p.temperature, "must be a number >= 0");
  if (p.top_k < 0) return bad("top_k", p.top_k, "must be >= 0 (0: off)");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", p.min_p, "must be in [0, 1]");
  if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f)
    return bad("repeat_penalty", p.repeat_penalty, "must be > 0 (1: off)");
  if (!std::isfinite(p.frequency_penalty)) return bad("frequency_penalty", p.frequency_penalty, "must be finite");
  if (!std::isfinite(p.presence_penalty)) return bad("presence_penalty", p.presence_penalty, "must be finite");
  if (p.penalty_last_n < 0) return bad("penalty_last_n", p.penalty_last_n, "must be >= 0");
  return Status::ok();
}

// The plain loop's answer is the first index whose value equals the largest non-NaN value
// (-0 and +0 compare equal; NaNs never win), or 0 when v[0] is NaN. Greedy decoding runs
// it over the whole vocabulary every token (Gemma 3: 262,144 logits, read from beyond
// L2), so it is one pass, 16 lanes at a time: each lane keeps its largest value and the
// first index holding it (maxps keeps its second operand when the first is NaN or equal,
// exactly when `x > m` is false), then the first index among the lanes holding the
// largest value.
int32_t argmax(std::span<const float> v) {
  if (v.empty()) return -1;
  const float* x = v.data();
  const size_t n = v.size();
  if (std::isnan(x[0])) return 0;
  float mx = x[0];
  size_t best = 0, i = 1;
#if defined(__SSE2__)
  if (n >= 17 && n <= size_t(INT32_MAX)) {
    __m128 m[4];
    __m128i idx[4], at[4];
    for (int k = 0; k < 4; ++k) {
      m[k] = _mm_set1_ps(x[0]);
      idx[k] = _mm_setzero_si128();
      at[k] = _mm_add_epi32(_mm_set1_epi32(int32_t(1 + 4 * k)), _mm_setr_epi32(0, 1, 2, 3));
    }
    const __m128i step = _mm_set1_epi32(16);
    for (; i + 16 <= n; i += 16) {
      for (int k = 0; k < 4; ++k) {
        const __m128 xv = _mm_loadu_ps(x + i + 4 * k);
        const __m128i gt = _mm_castps_si128(_mm_cmpgt_ps(xv, m[k]));
        m[k] = _mm_max_ps(xv, m[k]);
        idx[k] = _mm_or_si128(_mm_and_si128(gt, at[k]), _mm_andnot_si128(gt, idx[k]));
        at[k] = _mm_add_epi32(at[k], step);
      }
    }
    alignas(16) float lv[16];
    alignas(16) int32_t li[16];
    for (int k = 0; k < 4; ++k) {
      _mm_store_ps(lv + 4 * k, m[k]);
      _mm_store_si128(reinterpret_cast<__m128i*>(li + 4 * k), idx[k]);
    }
    for (float l : lv) mx = std::max(mx, l);
    best = n;
    for (int l = 0; l < 16; ++l)
      if (lv[l] == mx) best = std::min(best, size_t(li[l]));
  }
#endif
  for (; i < n; ++i)
    if (x[i] > mx) {
      mx = x[i];
      best = i;
    }
  return int32_t(best);
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

void Sampler::reset() {
  history_.clear();
  rng_.reseed(p_.seed);
}

void Sampler::accept(int32_t token) {
  if (p_.penalty_last_n <= 0) return;
  if (history_.size() >= size_t(p_.penalty_last_n)) history_.erase(history_.begin());
  history_.push_back(token);
}

void Sampler::apply_penalties(std::vector<Cand>& c) {
  // Candidates are in id order here, so token t's candidate is c[t]. As in llama.cpp:
  // logit / repeat_penalty when positive, * when not; then minus count * frequency and
  // presence once.
  if (counts_.size() < c.size()) counts_.assign(c.size(), 0);
  for (int32_t t : history_)
    if (t >= 0 && size_t(t) < c.size()) ++counts_[size_t(t)];
  for (int32_t t : history_) {
    if (t < 0 || size_t(t) >= c.size() || counts_[size_t(t)] == 0) continue;
    float& l = c[size_t(t)].logit;
    l = l <= 0.0f ? l * p_.repeat_penalty : l / p_.repeat_penalty;
    l -= float(counts_[size_t(t)]) * p_.frequency_penalty + p_.presence_penalty;
    counts_[size_t(t)] = 0;  // applied once per distinct token; leaves counts_ zeroed
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  const bool penalties = !history_.empty() &&
                         (p_.repeat_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f);
  if (p_.temperature <= 0.0f && !penalties) return argmax(logits);

  const size_t n = logits.size();
  cands_.resize(n);
  for (size_t i = 0; i < n; ++i) cands_[i] = {int32_t(i), logits[i], 0.0f};
  if (penalties) apply_penalties(cands_);

  if (p_.temperature <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < n; ++i)
      if (cands_[i].logit > cands_[best].logit) best = i;
    return cands_[best].id;
  }

  // Candidates are sorted (by logit, then id) only when a filter needs the order.
  auto by_logit = [](const Cand& a, const Cand& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t keep = n;
  bool sorted = false;
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    keep = size_t(p_.top_k);
    std::partial_sort(cands_.begin(), cands_.begin() + ptrdiff_t(keep), cands_.end(), by_logit);
    sorted = true;
  }

  auto max_logit = [&] {
    if (sorted) return cands_[0].logit;
    float mx = cands_[0].logit;
    for (size_t i = 1; i < keep; ++i) mx = std::max(mx, cands_[i].logit);
    return mx;
  };
  auto softmax = [&](float inv_temp) {
    const float mx = max_logit();
    double sum = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cands_[i].p = std::exp((cands_[i].logit - mx) * inv_temp);
      sum += cands_[i].p;
    }
    for (size_t i = 0; i < keep; ++i) cands_[i].p = float(cands_[i].p / sum);
  };

  if (p_.top_p < 1.0f) {
    if (!sorted) {
      std::sort(cands_.begin(), cands_.begin() + ptrdiff_t(keep), by_logit);
      sorted = true;
    }
    softmax(1.0f);
    double cum = 0.0;
    size_t k = keep;
    for (size_t i = 0; i < keep; ++i) {
      cum += cands_[i].p;
      if (cum >= p_.top_p) {
        k = i + 1;
        break;
      }
    }
    keep = std::max<size_t>(1, k);
  }
  if (p_.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
    const float cut = max_logit() + std::log(p_.min_p);
    if (sorted) {
      size_t k = 1;
      while (k < keep && cands_[k].logit >= cut) ++k;
      keep = k;
    } else {
      size_t k = 0;  // stable, in place
      for (size_t i = 0; i < keep; ++i)
        if (cands_[i].logit >= cut) cands_[k++] = cands_[i];
      keep = k;
    }
  }

  softmax(1.0f / p_.temperature);
  const double u = rng_.uniform();
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += cands_[i].p;
    if (u < cum) return cands_[i].id;
  }
  return cands_[keep - 1].id;
}

}  // namespace ts::engine
