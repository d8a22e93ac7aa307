#include "engine/sampling.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>

#include "ops/ops.h"

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
  // 0 keeps the most probable token only: the nucleus always holds at least one.
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) return bad("top_p", p.top_p, "must be in [0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p", p.min_p, "must be in [0, 1]");
  if (!std::isfinite(p.repeat_penalty) || p.repeat_penalty <= 0.0f)
    return bad("repeat_penalty", p.repeat_penalty, "must be > 0 (1: off)");
  if (!std::isfinite(p.frequency_penalty)) return bad("frequency_penalty", p.frequency_penalty, "must be finite");
  if (!std::isfinite(p.presence_penalty)) return bad("presence_penalty", p.presence_penalty, "must be finite");
  if (p.penalty_last_n < 0) return bad("penalty_last_n", p.penalty_last_n, "must be >= 0");
  for (const auto& [id, b] : p.logit_bias) {
    if (id < 0) return bad("logit_bias token id", id, "must be >= 0");
    if (!std::isfinite(b)) return bad("logit_bias", b, "must be finite");
  }
  return Status::ok();
}

// The plain loop's answer is the first index whose value equals the largest non-NaN value
// (-0 and +0 compare equal; NaNs never win), or 0 when v[0] is NaN. Greedy decoding runs
// it over the whole vocabulary every token (Gemma 3: 262,144 logits, read from beyond
// L2), so it is one pass, 16 lanes at a time: each lane keeps its largest value and the
// first index holding it (maxps keeps its second operand when the first is NaN or equal,
// exactly when `x > m` is false), then the first index among the lanes holding the
// largest value.
OutputLogprob output_logprob(std::span<const float> row, int32_t token, int32_t n_top) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : row) mx = std::max(mx, double(l));
  double sum = 0;
  for (float l : row) sum += std::exp(double(l) - mx);
  const double lse = mx + std::log(sum);
  OutputLogprob out;
  out.token = token;
  out.logprob = float(double(row[size_t(token)]) - lse);
  if (n_top > 0) {
    // One pass keeping the best k (k <= 20) in order; on ties the lower id first.
    const size_t k = std::min(row.size(), size_t(n_top));
    std::vector<int32_t> best;
    best.reserve(k + 1);
    for (size_t i = 0; i < row.size(); ++i) {
      const float l = row[i];
      if (best.size() == k && !(l > row[size_t(best.back())])) continue;
      size_t at = best.size();
      while (at > 0 && l > row[size_t(best[at - 1])]) --at;
      best.insert(best.begin() + ptrdiff_t(at), int32_t(i));
      if (best.size() > k) best.pop_back();
    }
    for (int32_t id : best) out.top.emplace_back(id, float(double(row[size_t(id)]) - lse));
  }
  return out;
}

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

namespace {

constexpr size_t kDrawBlock = 64;

struct Cand {
  int32_t id;
  float logit;
  float p;
};

// The working memory of sampling one token, per thread: a server samples many sequences
// on the same few threads, and nothing of it lives from one call to the next (for Gemma 3's
// vocabulary, 1 MB of exponentials, and as much for logits with penalties).
struct Scratch {
  std::vector<Cand> cands;     // collected candidates
  std::vector<float> work, e;  // logits with bias and penalties; exponentials
  std::vector<double> bsum;    // draw_all's sums per block
  std::vector<int32_t> counts; // per token id, left all zero
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Tokens with logit >= cut into cands (id order).
void collect(std::span<const float> w, float cut, std::vector<Cand>& cands) {
  const size_t n = w.size();
  cands.clear();
  size_t i = 0;
#if defined(__SSE2__)
  const __m128 c = _mm_set1_ps(cut);
  for (; i + 16 <= n; i += 16) {
    const float* x = w.data() + i;
    const int mask = _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(x), c)) |
                     _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(x + 4), c)) << 4 |
                     _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(x + 8), c)) << 8 |
                     _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(x + 12), c)) << 12;
    for (unsigned bits = unsigned(mask); bits != 0; bits &= bits - 1) {
      const size_t j = i + size_t(__builtin_ctz(bits));
      cands.push_back({int32_t(j), w[j], 0.0f});
    }
  }
#endif
  for (; i < n; ++i)
    if (w[i] >= cut) cands.push_back({int32_t(i), w[i], 0.0f});
}

}  // namespace

void Sampler::apply_penalties(std::vector<float>& l) {
  // As in llama.cpp: logit / repeat_penalty when positive, * when not; then minus
  // count * frequency and presence once.
  std::vector<int32_t>& counts = scratch().counts;
  if (counts.size() < l.size()) counts.resize(l.size(), 0);
  for (int32_t t : history_)
    if (t >= 0 && size_t(t) < l.size()) ++counts[size_t(t)];
  for (int32_t t : history_) {
    if (t < 0 || size_t(t) >= l.size() || counts[size_t(t)] == 0) continue;
    float& x = l[size_t(t)];
    x = x <= 0.0f ? x * p_.repeat_penalty : x / p_.repeat_penalty;
    x -= float(counts[size_t(t)]) * p_.frequency_penalty + p_.presence_penalty;
    counts[size_t(t)] = 0;  // applied once per distinct token; leaves counts zeroed
  }
}

void Sampler::apply_bias(std::vector<float>& l) const {
  for (const auto& [id, b] : p_.logit_bias)
    if (id >= 0 && size_t(id) < l.size()) l[size_t(id)] += b;
}

// Temperature softmax over the whole vocabulary in id order (tokens below `cut` get
// probability 0), then the token where the cumulative sum passes u * sum: the exps 16 at a
// time (ops::exp_shifted), the sums per block of 64, so the draw reads one block.
int32_t Sampler::draw_all(std::span<const float> w, float mx, float cut) {
  const size_t n = w.size(), nb = (n + kDrawBlock - 1) / kDrawBlock;
  Scratch& sc = scratch();
  std::vector<float>& ex = sc.e;
  std::vector<double>& bsum = sc.bsum;
  ex.resize(n);
  bsum.resize(nb);
  const double sum = ops::exp_shifted(w.data(), int64_t(n), mx, 1.0f / p_.temperature, cut, ex.data(),
                                      int64_t(kDrawBlock), bsum.data());
  const double target = rng_.uniform() * sum;
  double cum = 0.0;
  size_t b = 0;
  for (; b + 1 < nb && !(target < cum + bsum[b]); ++b) cum += bsum[b];
  const size_t b0 = b * kDrawBlock, b1 = std::min(n, b0 + kDrawBlock);
  size_t last = b0;  // the block's last token with a nonzero probability (rounding)
  for (size_t i = b0; i < b1; ++i) {
    if (!(ex[i] > 0.0f)) continue;
    cum += ex[i];
    last = i;
    if (target < cum) return int32_t(i);
  }
  return int32_t(last);
}

// Top-k and top-p need the best tokens in order, rarely more than a few hundred of a
// vocabulary of 262,144: the tokens within `delta` of the largest logit are collected and
// sorted, delta growing until they hold the top k, or the top-p mass. Every token left out
// has a lower logit than every token collected, so the collected ones, sorted, are the
// start of the whole vocabulary's order: the result is that of sorting everything.
size_t Sampler::ordered_candidates(std::span<const float> w, float mx) {
  const size_t n = w.size();
  const bool top_k = p_.top_k > 0 && size_t(p_.top_k) < n;
  const size_t k = top_k ? size_t(p_.top_k) : n;
  Scratch& sc = scratch();
  std::vector<Cand>& cands = sc.cands;
  auto by_logit = [](const Cand& a, const Cand& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  // Top-p without top-k normalises over the whole vocabulary: only the sum is needed.
  double s_all = 0.0;
  if (!top_k && p_.top_p < 1.0f)
    s_all = ops::exp_shifted(w.data(), int64_t(n), mx, 1.0f, -std::numeric_limits<float>::infinity(), nullptr);
  // Past a spread of 1e4 (e^-1e4 is 0 in float) the rest is taken at once.
  for (float delta = 4.0f;; delta *= 4.0f) {
    const bool all = delta > 1e4f;
    const float cut = all ? -std::numeric_limits<float>::infinity() : mx - delta;
    collect(w, cut, cands);
    const size_t m = cands.size();
    if (top_k && m < k && !all) continue;
    const size_t keep = std::min(k, m);
    if (m == 0) return 0;  // no logit is comparable (NaN)
    std::partial_sort(cands.begin(), cands.begin() + ptrdiff_t(keep), cands.begin() + ptrdiff_t(m), by_logit);
    if (p_.top_p >= 1.0f) return keep;
    // Softmax at temperature 1 over the kept tokens (top-k) or the vocabulary, then the
    // shortest prefix whose probabilities add up to top_p.
    const float m0 = cands[0].logit;
    double s = s_all;
    if (top_k) s = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cands[i].p = std::exp(cands[i].logit - m0);
      if (top_k) s += cands[i].p;
    }
    double cum = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cum += float(cands[i].p / s);
      if (cum >= p_.top_p) return i + 1;
    }
    if (top_k || all || m == n) return std::max<size_t>(1, keep);
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  const bool penalties = !history_.empty() &&
                         (p_.repeat_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f);
  const bool bias = !p_.logit_bias.empty();
  if (p_.temperature <= 0.0f && !penalties && !bias) return argmax(logits);
  if (logits.empty()) return -1;
  Scratch& sc = scratch();
  std::span<const float> w = logits;
  if (penalties || bias) {
    sc.work.assign(logits.begin(), logits.end());
    apply_bias(sc.work);
    if (penalties) apply_penalties(sc.work);
    w = sc.work;
  }
  const int32_t best = argmax(w);
  if (p_.temperature <= 0.0f) return best;
  const float mx = w[size_t(best)];
  const size_t n = w.size();

  // Without top-k and top-p nothing needs the order: min-p and the draw go over the
  // vocabulary in id order.
  if (!((p_.top_k > 0 && size_t(p_.top_k) < n) || p_.top_p < 1.0f))
    return draw_all(w, mx, p_.min_p > 0.0f ? mx + std::log(p_.min_p) : -std::numeric_limits<float>::infinity());

  size_t keep = ordered_candidates(w, mx);
  if (keep == 0) return best;
  std::vector<Cand>& cands = sc.cands;
  if (p_.min_p > 0.0f) {
    // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p)
    const float cut = cands[0].logit + std::log(p_.min_p);
    size_t k = 1;
    while (k < keep && cands[k].logit >= cut) ++k;
    keep = k;
  }
  // Softmax at the temperature over the kept tokens, in order, and the draw.
  const float inv_temp = 1.0f / p_.temperature, m0 = cands[0].logit;
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cands[i].p = std::exp((cands[i].logit - m0) * inv_temp);
    sum += cands[i].p;
  }
  for (size_t i = 0; i < keep; ++i) cands[i].p = float(cands[i].p / sum);
  const double u = rng_.uniform();
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += cands[i].p;
    if (u < cum) return cands[i].id;
  }
  return cands[keep - 1].id;
}

}  // namespace ts::engine
