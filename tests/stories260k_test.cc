// stories260K against llama.cpp: every case of stories260K_greedy.json must produce the
// same 64 greedy tokens, and the log-probabilities of the oracle's top-3 tokens must agree
// (log-softmax computed in double).
//
// How closely they can agree: llama.cpp's CPU flash attention (its default) accumulates
// softmax(QK)V in an F16 vector, rounding after every key, and we do the same. That
// accumulator is chaotic: a 1-ulp difference anywhere upstream (an F32 summation order,
// a SIMD expf) flips some F16 roundings, and the flips compound over layers and steps.
// Measured on this model: the prompt logits agree to ~1e-5, the first steps to < 1e-3;
// over 64 steps the mean difference is ~6e-4 with isolated outliers up to ~1e-2, exactly
// the spread between two of our own builds that differ only in FMA contraction. So: 1e-3
// for the first kStrictSteps steps, 1e-3 on average over all, 2e-2 for any single one.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/sampling.h"
#include "models/register.h"
#include "tokenizer/tokenizer.h"

namespace ts {
namespace {

const std::string kModel = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kGolden = std::string(TS_SHARED_DIR) + "/testdata/stories260K_greedy.json";
constexpr size_t kStrictSteps = 8;
constexpr double kStrictTol = 1e-3;
constexpr double kMeanTol = 1e-3;
constexpr double kAnyTol = 2e-2;

nlohmann::json load_golden() {
  std::ifstream in(kGolden);
  EXPECT_TRUE(in.good()) << kGolden;
  return nlohmann::json::parse(in);
}

std::vector<double> log_softmax(std::span<const float> logits) {
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, double(l));
  double sum = 0.0;
  for (float l : logits) sum += std::exp(double(l) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - lse;
  return out;
}

void run_case(int n_threads, int64_t n_batch) {
  models::register_all();
  const nlohmann::json golden = load_golden();
  engine::ModelOptions mo;
  mo.n_threads = n_threads;
  auto model = engine::Model::load(kModel, mo);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto ctx = engine::Context::create(**model, 0, n_batch);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().to_string();
  double worst = 0.0, sum = 0.0;
  int64_t n_compared = 0;
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    const auto prompt = c["prompt_tokens"].get<std::vector<int32_t>>();
    const auto expected = c["completion_tokens"].get<std::vector<int32_t>>();
    const auto& top3 = c["top3_logprobs_per_step"];
    ASSERT_EQ(top3.size(), expected.size());
    (*ctx)->reset();
    ASSERT_TRUE((*ctx)->eval(prompt).is_ok());
    std::vector<int32_t> got;
    for (size_t step = 0; step < expected.size(); ++step) {
      const auto logits = (*ctx)->logits(0);
      const std::vector<double> lp = log_softmax(logits);
      for (const auto& e : top3[step]) {
        const int id = e["id"].get<int>();
        const double want = e["logprob"].get<double>();
        const double diff = std::abs(lp[size_t(id)] - want);
        worst = std::max(worst, diff);
        sum += diff;
        ++n_compared;
        EXPECT_LE(diff, step < kStrictSteps ? kStrictTol : kAnyTol)
            << "step " << step << " id " << id << " ours " << lp[size_t(id)] << " oracle " << want;
      }
      const int32_t id = engine::argmax(logits);
      got.push_back(id);
      if (id != expected[step]) break;  // the rest would compare different histories
      ASSERT_TRUE((*ctx)->eval(std::span<const int32_t>(&id, 1)).is_ok());
    }
    EXPECT_EQ(got, std::vector<int32_t>(expected.begin(), expected.begin() + ptrdiff_t(got.size())));
    EXPECT_EQ(got.size(), expected.size());
  }
  ASSERT_GT(n_compared, 0);
  const double mean = sum / double(n_compared);
  EXPECT_LE(mean, kMeanTol);
  std::printf("|logprob - oracle| over %lld values: mean %.2e, max %.2e\n", static_cast<long long>(n_compared), mean,
              worst);
}

TEST(Stories260K, GreedyMatchesLlamaCpp) { run_case(2, 512); }
TEST(Stories260K, GreedyMatchesLlamaCppOneThread) { run_case(1, 512); }
// Prompts evaluated 3 tokens per forward pass: the chunking must not change anything.
TEST(Stories260K, GreedyMatchesLlamaCppSmallBatches) { run_case(2, 3); }

TEST(Stories260K, TokenizerAgreesWithOracle) {
  const nlohmann::json golden = load_golden();
  auto file = gguf::File::open(kModel);
  ASSERT_TRUE(file.is_ok());
  auto tok = tok::Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  for (const auto& c : golden["cases"]) {
    const auto ids = (*tok)->encode(c["prompt"].get<std::string>(), true, true);
    EXPECT_EQ(ids, c["prompt_tokens"].get<std::vector<int32_t>>()) << c["prompt"];
    // The CLI streams a continuation token by token: the text must be the oracle's.
    tok::StreamDecoder dec(**tok);
    std::string text;
    for (int32_t id : c["completion_tokens"].get<std::vector<int32_t>>()) text += dec.push(id);
    text += dec.flush();
    EXPECT_EQ(text, c["completion_text"].get<std::string>());
  }
}

}  // namespace
}  // namespace ts
