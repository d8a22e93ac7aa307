#include "engine/sampling.h"

#include <gtest/gtest.h>

// Tests spell out only the fields that matter with designated initializers.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

namespace ts::engine {
namespace {

// Logits whose softmax is `probs` (up to normalisation).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? float(std::log(p)) : -1e30f);
  return l;
}

std::map<int32_t, int> histogram(const SamplingParams& p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits)];
  return h;
}

TEST(Sampling, ArgmaxFirstOnTies) {
  std::vector<float> v = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(argmax(v), 1);
  EXPECT_EQ(argmax(std::span<const float>()), -1);
}

// argmax against the plain loop: first index of the largest non-NaN value (-0 == +0),
// 0 when v[0] is NaN; sizes around the 16-lane blocks, ties, NaNs, infinities, zeros.
TEST(Sampling, ArgmaxEqualsPlainLoop) {
  auto plain = [](const std::vector<float>& v) {
    if (std::isnan(v[0])) return int32_t(0);
    float mx = v[0];
    for (float x : v)
      if (x > mx) mx = x;
    int32_t i = 0;
    while (!(v[size_t(i)] == mx)) ++i;
    return i;
  };
  Rng rng(21);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1.0f, -1.0f, 3.0f};
  for (size_t n : {size_t(1), size_t(2), size_t(15), size_t(16), size_t(17), size_t(31), size_t(32), size_t(33),
                   size_t(100), size_t(1000), size_t(262144)}) {
    for (int rep = 0; rep < (n > 1000 ? 20 : 300); ++rep) {
      std::vector<float> v(n);
      const int mode = rep % 4;
      for (auto& x : v) {
        const uint64_t r = rng.next_u64();
        if (mode == 0) x = rng.normal();                           // distinct values
        else if (mode == 1) x = float(int(r % 5));                 // many ties
        else if (mode == 2) x = specials[r % 8];                   // NaNs, zeros, infinities
        else x = (r % 3 == 0) ? -INFINITY : float(int(r % 3)) - 2.0f;  // ties at the top, -inf
      }
      ASSERT_EQ(argmax(v), plain(v)) << "n " << n << " mode " << mode << " rep " << rep;
    }
  }
  // The largest value last, first, and a -0 before a +0 in different lanes.
  std::vector<float> v(1000, -1.0f);
  v.back() = 2.0f;
  EXPECT_EQ(argmax(v), 999);
  v.assign(1000, -1.0f);
  v[0] = 5.0f;
  EXPECT_EQ(argmax(v), 0);
  v.assign(1000, -1.0f);
  v[22] = -0.0f;
  v[37] = 0.0f;
  EXPECT_EQ(argmax(v), 22);
  v[22] = 0.0f;
  v[37] = -0.0f;
  EXPECT_EQ(argmax(v), 22);
  v.assign(1000, NAN);
  v[0] = -INFINITY;
  EXPECT_EQ(argmax(v), 0);
}

// The engine's log-probabilities (what it returns instead of logit rows): log softmax in
// double against a direct computation, the top-k highest first with ties by the lower id.
TEST(Sampling, OutputLogprobIsLogSoftmaxAndTopK) {
  const std::vector<float> row = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f};
  double sum = 0;
  for (float l : row) sum += std::exp(double(l));
  const double lse = std::log(sum);
  const OutputLogprob lp = output_logprob(row, 4, 3);
  EXPECT_EQ(lp.token, 4);
  EXPECT_NEAR(lp.logprob, 0.5 - lse, 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // 3.0, the lower id of the tie first
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 5);
  EXPECT_NEAR(lp.top[2].second, 2.0 - lse, 1e-6);
  double total = 0;
  for (size_t i = 0; i < row.size(); ++i) total += std::exp(double(output_logprob(row, int32_t(i), 0).logprob));
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_TRUE(output_logprob(row, 0, 0).top.empty());
  EXPECT_EQ(output_logprob(row, 0, 50).top.size(), row.size());  // k capped by the vocabulary
}

TEST(Sampling, GreedyIsArgmax) {
  SamplingParams p;  // temperature 0
  Sampler s(p);
  Rng rng(7);
  for (int it = 0; it < 100; ++it) {
    std::vector<float> l(50);
    for (auto& x : l) x = rng.normal();
    EXPECT_EQ(s.sample(l), argmax(l));
  }
}

TEST(Sampling, SeededDeterminism) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  std::vector<float> l = logits_of({0.1, 0.2, 0.3, 0.4});
  Sampler a(p), b(p);
  std::vector<int32_t> ra, rb;
  for (int i = 0; i < 200; ++i) {
    ra.push_back(a.sample(l));
    rb.push_back(b.sample(l));
  }
  EXPECT_EQ(ra, rb);
  a.reset();
  for (int i = 0; i < 200; ++i) EXPECT_EQ(a.sample(l), ra[size_t(i)]);
  p.seed = 999;
  Sampler c(p);
  std::vector<int32_t> rc;
  for (int i = 0; i < 200; ++i) rc.push_back(c.sample(l));
  EXPECT_NE(ra, rc);
  // Every token is drawn, roughly by its probability.
  auto h = histogram({.temperature = 1.0f, .seed = 5}, l, 20000);
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(h[t] / 20000.0, 0.1 * (t + 1), 0.02);
}

TEST(Sampling, TopKMasks) {
  std::vector<float> l = logits_of({0.1, 0.4, 0.2, 0.3});
  auto h = histogram({.temperature = 1.0f, .top_k = 2, .seed = 1}, l, 5000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[1], 0);
  EXPECT_GT(h[3], 0);
  // Renormalised among the two: 0.4 / 0.7.
  EXPECT_NEAR(h[1] / 5000.0, 0.4 / 0.7, 0.03);
  auto h1 = histogram({.temperature = 1.0f, .top_k = 1, .seed = 1}, l, 200);
  EXPECT_EQ(h1.size(), 1u);
  EXPECT_EQ(h1.begin()->first, 1);
}

TEST(Sampling, TopPMasks) {
  std::vector<float> l = logits_of({0.05, 0.5, 0.15, 0.3});
  // The smallest set reaching 0.5 is {1}; reaching 0.7 is {1, 3}; 0.9: {1, 3, 2}.
  EXPECT_EQ(histogram({.temperature = 1.0f, .top_p = 0.5f, .seed = 2}, l, 500).size(), 1u);
  auto h = histogram({.temperature = 1.0f, .top_p = 0.7f, .seed = 2}, l, 2000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(1) && h.count(3));
  auto h3 = histogram({.temperature = 1.0f, .top_p = 0.9f, .seed = 2}, l, 4000);
  EXPECT_EQ(h3.size(), 3u);
  EXPECT_FALSE(h3.count(0));
  // 0 (which OpenAI's API allows) keeps only the most probable token, with or without top-k.
  auto h0 = histogram({.temperature = 1.5f, .top_p = 0.0f, .seed = 3}, l, 300);
  ASSERT_EQ(h0.size(), 1u);
  EXPECT_EQ(h0.begin()->first, 1);
  auto h0k = histogram({.temperature = 1.5f, .top_k = 3, .top_p = 0.0f, .seed = 3}, l, 300);
  ASSERT_EQ(h0k.size(), 1u);
  EXPECT_EQ(h0k.begin()->first, 1);
}

TEST(Sampling, MinPMasks) {
  std::vector<float> l = logits_of({0.05, 0.5, 0.15, 0.3});
  // min_p 0.5: keep p >= 0.25 -> {1, 3}. min_p 0.2: p >= 0.1 -> {1, 3, 2}.
  auto h = histogram({.temperature = 1.0f, .min_p = 0.5f, .seed = 3}, l, 2000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(1) && h.count(3));
  auto h3 = histogram({.temperature = 1.0f, .min_p = 0.2f, .seed = 3}, l, 4000);
  EXPECT_EQ(h3.size(), 3u);
  EXPECT_FALSE(h3.count(0));
}

// The filters as plainly as they can be written: every candidate, sorted when an order
// is needed, then the draw with `u`. The sampler collects only the tokens near the top
// (Sampler::ordered_candidates); with the same random number it must pick the same token.
int32_t reference_sample(const SamplingParams& p, const std::vector<float>& logits, double u) {
  struct C {
    int32_t id;
    float logit;
    float p;
  };
  std::vector<C> c;
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({int32_t(i), logits[i], 0.0f});
  auto by_logit = [](const C& a, const C& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  std::sort(c.begin(), c.end(), by_logit);
  size_t keep = c.size();
  if (p.top_k > 0 && size_t(p.top_k) < keep) keep = size_t(p.top_k);
  auto softmax = [&](float inv_temp) {
    double sum = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      c[i].p = std::exp((c[i].logit - c[0].logit) * inv_temp);
      sum += c[i].p;
    }
    for (size_t i = 0; i < keep; ++i) c[i].p = float(c[i].p / sum);
  };
  if (p.top_p < 1.0f) {
    softmax(1.0f);
    double cum = 0.0;
    size_t k = keep;
    for (size_t i = 0; i < keep; ++i) {
      cum += c[i].p;
      if (cum >= p.top_p) {
        k = i + 1;
        break;
      }
    }
    keep = std::max<size_t>(1, k);
  }
  if (p.min_p > 0.0f) {
    const float cut = c[0].logit + std::log(p.min_p);
    size_t k = 1;
    while (k < keep && c[k].logit >= cut) ++k;
    keep = k;
  }
  softmax(1.0f / p.temperature);
  double cum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cum += c[i].p;
    if (u < cum) return c[i].id;
  }
  return c[keep - 1].id;
}

TEST(Sampling, OrderedFiltersEqualFullSort) {
  Rng rng(31);
  const SamplingParams configs[] = {
      {.temperature = 1.0f, .top_k = 40},
      {.temperature = 1.0f, .top_p = 0.9f},
      {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f},
      {.temperature = 1.3f, .top_p = 0.5f, .min_p = 0.1f},
      {.temperature = 0.7f, .top_k = 1},
      {.temperature = 1.0f, .top_k = 3000, .top_p = 0.99f},
      {.temperature = 1.0f, .top_p = 0.999f},
  };
  // Vocabularies of several sizes; logits peaked (a few tokens carry the mass, as in a
  // trained model), flat (top-p needs most of the vocabulary) and with many ties.
  for (size_t n : {size_t(50), size_t(1000), size_t(262144)}) {
    for (int shape = 0; shape < 4; ++shape) {
      // 3: a few finite logits among -inf, -1e30 and values 1e5 below (the candidates'
      // spread grows until it takes everything).
      std::vector<float> l(n);
      for (auto& x : l) {
        const uint64_t r = rng.next_u64();
        x = shape == 0   ? 4.0f * rng.normal()
            : shape == 1 ? 0.05f * rng.normal()
            : shape == 2 ? float(int(r % 7))
            : r % 5 == 0 ? rng.normal()
            : r % 5 == 1 ? -1e5f + rng.normal()
            : r % 5 == 2 ? -1e30f
                         : -std::numeric_limits<float>::infinity();
      }
      for (size_t ci = 0; ci < std::size(configs); ++ci) {
        SamplingParams p = configs[ci];
        p.seed = 100 + ci;
        Sampler s(p);
        Rng u(p.seed);  // the sampler's stream: one uniform per draw
        const int draws = n > 1000 ? 4 : 60;
        for (int d = 0; d < draws; ++d)
          ASSERT_EQ(s.sample(l), reference_sample(p, l, u.uniform()))
              << "n " << n << " shape " << shape << " config " << ci << " draw " << d;
      }
    }
  }
}

// Without top-k and top-p the draw goes over the vocabulary in id order (Sampler::draw_all,
// blocks of 64): frequencies follow the softmax at the temperature, and min-p excludes
// exactly the tokens below its cut.
TEST(Sampling, UnorderedDrawFollowsSoftmax) {
  Rng rng(41);
  std::vector<float> l(1000);
  for (auto& x : l) x = 1.5f * rng.normal();
  for (float min_p : {0.0f, 0.05f}) {
    const float temp = 0.7f;
    SamplingParams p{.temperature = temp, .min_p = min_p, .seed = 9};
    const float mx = *std::max_element(l.begin(), l.end());
    const float cut = min_p > 0.0f ? mx + std::log(min_p) : -INFINITY;
    std::vector<double> prob(l.size());
    double sum = 0.0;
    for (size_t i = 0; i < l.size(); ++i) sum += prob[i] = l[i] >= cut ? std::exp(double(l[i] - mx) / temp) : 0.0;
    const int n_draws = 60000;
    auto h = histogram(p, l, n_draws);
    for (const auto& [t, count] : h) ASSERT_GT(prob[size_t(t)], 0.0) << "token " << t << " is below the min-p cut";
    for (size_t i = 0; i < l.size(); ++i) {
      const double q = prob[i] / sum, f = double(h.count(int32_t(i)) ? h[int32_t(i)] : 0) / n_draws;
      EXPECT_NEAR(f, q, 5.0 * std::sqrt(q * (1.0 - q) / n_draws) + 1e-4) << "token " << i;
    }
  }
}

TEST(Sampling, TemperatureSharpens) {
  std::vector<float> l = logits_of({0.4, 0.6});
  auto cold = histogram({.temperature = 0.25f, .seed = 4}, l, 10000);
  // p ~ 0.6^4 / (0.6^4 + 0.4^4) = 0.835
  EXPECT_NEAR(cold[1] / 10000.0, 0.835, 0.02);
}

TEST(Sampling, RepetitionPenalty) {
  // Token 0 leads; penalising it (seen twice) hands greedy decoding to token 1.
  std::vector<float> l = {2.0f, 1.8f, -1.0f};
  SamplingParams p;
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  EXPECT_EQ(s.sample(l), 0);  // no history yet
  s.accept(0);
  EXPECT_EQ(s.sample(l), 1);  // 2.0 / 1.5 = 1.33 < 1.8
  // Negative logits are multiplied (pushed further down).
  std::vector<float> neg = {-1.0f, -1.2f};
  Sampler s2(p);
  s2.accept(0);
  EXPECT_EQ(s2.sample(neg), 1);  // -1.5 < -1.2
}

TEST(Sampling, FrequencyAndPresencePenalties) {
  std::vector<float> l = {2.0f, 1.0f};
  SamplingParams p;
  p.frequency_penalty = 0.3f;
  Sampler s(p);
  s.accept(0);
  s.accept(0);
  EXPECT_EQ(s.sample(l), 0);  // 2.0 - 0.6 = 1.4 > 1.0
  s.accept(0);
  s.accept(0);
  EXPECT_EQ(s.sample(l), 1);  // 2.0 - 1.2 = 0.8 < 1.0
  SamplingParams q;
  q.presence_penalty = 1.5f;
  Sampler t(q);
  t.accept(0);
  t.accept(0);
  EXPECT_EQ(t.sample(l), 1);  // 2.0 - 1.5 (once, whatever the count)
  q.presence_penalty = 0.9f;
  Sampler u(q);
  for (int i = 0; i < 10; ++i) u.accept(0);
  EXPECT_EQ(u.sample(l), 0);  // 1.1 > 1.0
}

TEST(Sampling, PenaltyWindow) {
  std::vector<float> l = {2.0f, 1.8f, 0.0f};
  SamplingParams p;
  p.repeat_penalty = 2.0f;
  p.penalty_last_n = 2;
  Sampler s(p);
  s.accept(0);
  EXPECT_EQ(s.sample(l), 1);
  s.accept(2);
  s.accept(2);  // token 0 has left the window of 2
  EXPECT_EQ(s.sample(l), 0);
}

TEST(Sampling, LogitBiasComesFirst) {
  const std::vector<float> l = {2.0f, 1.8f, -1.0f};
  // Greedy follows the biased logits; the input is not modified.
  SamplingParams p;
  p.logit_bias = {{0, -100.0f}};
  Sampler s(p);
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_EQ(l[0], 2.0f);
  p.logit_bias = {{2, 3.5f}, {7, 50.0f}};  // id 7 is past the vocabulary: skipped
  EXPECT_EQ(Sampler(p).sample(l), 2);      // -1.0 + 3.5 = 2.5
  // Bias before penalties, as in llama.cpp's sampler chain (token 0 seen once, penalty 2).
  SamplingParams q;
  q.repeat_penalty = 2.0f;
  q.logit_bias = {{0, 2.0f}};  // bias first: (2 + 2) / 2 = 2.0 > 1.8; penalty first: 1 + 2 = 3
  Sampler t(q);
  t.accept(0);
  EXPECT_EQ(t.sample(l), 0);
  q.logit_bias = {{0, 1.4f}};  // bias first: (2 + 1.4) / 2 = 1.7 < 1.8; penalty first: 2.4
  Sampler u(q);
  u.accept(0);
  EXPECT_EQ(u.sample(l), 1);
  // Sampling at a temperature: a token banned with -100 never comes.
  SamplingParams r{.temperature = 1.0f, .seed = 9};
  r.logit_bias = {{1, -100.0f}};
  const auto h = histogram(r, logits_of({0.3, 0.4, 0.3}), 3000);
  EXPECT_EQ(h.count(1), 0u);
  EXPECT_NEAR(h.at(0) / 3000.0, 0.5, 0.05);
}

TEST(Sampling, ValidateRejectsBadValues) {
  EXPECT_TRUE(validate({}).is_ok());
  EXPECT_FALSE(validate({.temperature = -1.0f}).is_ok());
  EXPECT_FALSE(validate({.temperature = NAN}).is_ok());
  EXPECT_FALSE(validate({.top_k = -1}).is_ok());
  EXPECT_TRUE(validate({.top_p = 0.0f}).is_ok());
  EXPECT_FALSE(validate({.top_p = -0.1f}).is_ok());
  EXPECT_FALSE(validate({.top_p = NAN}).is_ok());
  EXPECT_FALSE(validate({.top_p = 1.5f}).is_ok());
  EXPECT_FALSE(validate({.min_p = -0.1f}).is_ok());
  EXPECT_FALSE(validate({.repeat_penalty = 0.0f}).is_ok());
  EXPECT_FALSE(validate({.penalty_last_n = -3}).is_ok());
  SamplingParams b;
  b.logit_bias = {{-1, 1.0f}};
  EXPECT_FALSE(validate(b).is_ok());
  for (float v : {NAN, INFINITY, -INFINITY}) {
    b.logit_bias = {{3, v}};
    EXPECT_FALSE(validate(b).is_ok()) << v;
  }
  b.logit_bias = {{3, -100.0f}, {5, 100.0f}};
  EXPECT_TRUE(validate(b).is_ok());
  EXPECT_EQ(validate({.temperature = -1.0f}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ts::engine
