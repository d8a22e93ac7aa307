// The default model (Gemma 3 270M Q4_K_M) against llama.cpp: greedy output token for token.
//
// tests/data/golden/gemma3/<name>.json hold, per prompt, llama.cpp's tokenization, its
// greedy continuation and its top-5 logprobs at every generated step
// (scripts/oracle/gen_gemma3_golden.py, pinned llama-cpp-python, F16 KV cache, flash
// attention on, prompt in one batch), plus the steps at which llama.cpp's own other
// configurations (flash attention off; prompt token by token) pick another token.
//
// Per prompt this test checks:
//   - our tokenizer gives llama.cpp's prompt ids (BOS added, special tokens parsed) and
//     our detokenizer its text;
//   - our greedy token equals llama.cpp's at every step (and the end-of-generation token
//     where llama.cpp stopped), except where llama.cpp's choice is not determined by the
//     model (see "Near-ties" below); decoding goes on with llama.cpp's token, so one
//     near-tie does not hide the steps after it;
//   - our logprobs of llama.cpp's top tokens agree within measured limits.
// And over all prompts (the acceptance criterion): our free-running greedy output
// is identical to llama.cpp's for at least 8 prompts, plain and chat among them.
//
// Near-ties. Gemma 3 270M amplifies rounding: one activation that rounds to the other int8
// level of a Q8_0/Q8_K block moves later logits by ~1e-3 relative, and its residual stream
// (values up to ~5e3) carries that on. llama.cpp itself, with flash attention off instead
// of on, moves its top-1 logprobs by up to 0.50 (mean 0.07) and its top-5 probabilities by
// up to 0.16, and picks another greedy token at steps whose top-2 gap is up to 0.72 logits
// (0.33 but for one step). An engine that is not bit-identical to llama.cpp can match it
// only where llama.cpp's choice does not hang on rounding, so a step may differ only when
// both engines see a near-tie there:
//   - for llama.cpp, its top-2 gap is below kTieGap or one of its own other
//     configurations picks another token at that step (recorded in the golden), and
//   - for us, llama.cpp's token trails our choice by less than kTieGap.
// Measured for our engine at the time of writing: top-1 |dlogprob| max 0.72, mean <= 0.05,
// top-5 |dp| max 0.20; 9 of 15 prompts identical; every difference at a near-tie.
//
// The model file is not in the repository (scripts/setup-model.sh installs it). Without it
// the test is skipped, or fails when TIERSERVE_REQUIRE_DEFAULT_MODEL is set (CI sets it).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model.h"
#include "engine/sampling.h"
#include "models/register.h"
#include "tokenizer/tokenizer.h"

namespace ts {
namespace {

constexpr double kTieGap = 0.4;                     // logits; llama.cpp's own flips: <= 0.33 but one
constexpr double kTop1LogprobTolerance = 1.0;       // max |dlogprob| of llama.cpp's top token
constexpr double kTop1LogprobMeanTolerance = 0.1;   // mean of that over a prompt's steps
constexpr double kTop5ProbTolerance = 0.25;         // max |dp| over llama.cpp's top 5
constexpr int kMinIdenticalPrompts = 8;
constexpr int kThreads = 2;

std::string default_model_path() {
  if (const char* dir = std::getenv("TIERSERVE_MODEL_DIR"); dir && *dir)
    return std::string(dir) + "/gemma-3-270m-q4_k_m.gguf";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf";
}

std::string golden_dir() { return std::string(TS_SOURCE_DIR) + "/tests/data/golden/gemma3"; }

std::vector<std::string> golden_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(golden_dir(), ec))
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json read_golden(const std::string& name) {
  std::ifstream in(golden_dir() + "/" + name + ".json");
  return nlohmann::json::parse(in);
}

// log-softmax over all logits, in double.
struct LogSoftmax {
  explicit LogSoftmax(std::span<const float> logits) : lg(logits) {
    double mx = -INFINITY;
    for (float x : logits) mx = std::max(mx, double(x));
    double sum = 0;
    for (float x : logits) sum += std::exp(double(x) - mx);
    lse = mx + std::log(sum);
  }
  double operator()(int32_t v) const { return double(lg[size_t(v)]) - lse; }
  std::span<const float> lg;
  double lse = 0;
};

// What one prompt gave. Failures are collected, not reported, so that they belong to the
// prompt's own test whichever test ran the prompt first.
struct Outcome {
  bool identical = false;  // free-running greedy output == llama.cpp's
  std::string kind;
  std::vector<std::string> failures;
};

class Gemma3Golden : public ::testing::TestWithParam<std::string> {
 public:
  // Loads the model once. Returns why it is unavailable ("" when ready): the model file is
  // missing (the test then skips, or fails when TIERSERVE_REQUIRE_DEFAULT_MODEL is set) or
  // does not load (a failure).
  static std::string unavailable() {
    const std::string path = default_model_path();
    if (!std::filesystem::exists(path))
      return "default model " + path +
             " is not installed: run scripts/setup-model.sh (set TIERSERVE_MODEL_DIR if it lives elsewhere)";
    if (!model_ && load_error_.empty()) {
      models::register_all();
      engine::ModelOptions o;
      o.n_threads = kThreads;
      auto m = engine::Model::load(path, o);
      if (!m.is_ok()) {
        load_error_ = m.status().to_string();
      } else {
        model_ = std::move(m).value();
        auto t = tok::Tokenizer::from_gguf(model_->gguf());
        if (t.is_ok()) tokenizer_ = std::move(t).value();
        else load_error_ = "tokenizer: " + t.status().to_string();
      }
    }
    EXPECT_TRUE(load_error_.empty()) << load_error_;
    return load_error_;
  }

  // Runs (once) and checks one golden.
  static const Outcome& run(const std::string& name) {
    auto it = outcomes_.find(name);
    if (it == outcomes_.end()) it = outcomes_.emplace(name, check(name)).first;
    return it->second;
  }

  static void TearDownTestSuite() {
    tokenizer_.reset();
    model_.reset();
  }

 private:
  static Outcome check(const std::string& name);

  static inline std::unique_ptr<engine::Model> model_;
  static inline std::unique_ptr<tok::Tokenizer> tokenizer_;
  static inline std::string load_error_;
  static inline std::map<std::string, Outcome> outcomes_;
};

Outcome Gemma3Golden::check(const std::string& name) {
  Outcome out;
  auto fail = [&out](const std::string& msg) { out.failures.push_back(msg); };
  const auto g = read_golden(name);
  out.kind = g.at("kind").get<std::string>();
  if (std::filesystem::file_size(default_model_path()) != g.at("model").at("bytes").get<uint64_t>())
    fail("the installed model is not the one the goldens were made from (scripts/setup-model.sh checks its SHA-256)");
  if (model_->config().arch != "gemma3") fail("architecture " + model_->config().arch + ", expected gemma3");

  // Tokenizer.
  const auto ids = g.at("prompt_ids").get<std::vector<int32_t>>();
  if (tokenizer_->encode(g.at("prompt_text").get<std::string>(), /*add_special=*/true, /*parse_special=*/true) != ids)
    fail("our prompt tokenization differs from llama.cpp's");
  const auto want = g.at("tokens").get<std::vector<int32_t>>();
  if (tokenizer_->decode(want) != g.at("text").get<std::string>())
    fail("our detokenized text differs from llama.cpp's: '" + tokenizer_->decode(want) + "'");

  // Steps at which llama.cpp's other configurations chose another token.
  std::set<size_t> unsettled;
  if (g.contains("llama_cpp_variant_flips"))
    for (const auto& [variant, steps] : g.at("llama_cpp_variant_flips").items())
      for (const auto& s : steps) unsettled.insert(s.get<size_t>());

  // Greedy decode, fed llama.cpp's tokens.
  const auto& steps = g.at("steps");
  auto ctx_r = engine::Context::create(*model_, int64_t(ids.size() + steps.size() + 8), 512);
  if (!ctx_r.is_ok()) {
    fail(ctx_r.status().to_string());
    return out;
  }
  engine::Context& ctx = **ctx_r;
  if (Status st = ctx.eval(ids); !st.is_ok()) {
    fail(st.to_string());
    return out;
  }
  double max_dlp1 = 0, sum_dlp1 = 0, max_dp5 = 0;
  int near_ties = 0, n_steps = 0;
  int64_t first_diff = -1;
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& st = steps[s];
    const auto logits = ctx.logits(0);
    const int32_t ours = engine::argmax(logits);
    const bool eog_step = st.contains("eog");
    const int32_t theirs = eog_step ? st.at("eog").get<int32_t>() : want[s];
    const LogSoftmax lp(logits);
    const auto top = st.at("top_ids").get<std::vector<int32_t>>();
    const auto top_lp = st.at("top_logprobs").get<std::vector<double>>();
    const double gap = st.at("gap").get<double>();
    ++n_steps;
    const double dlp1 = std::fabs(lp(top[0]) - top_lp[0]);
    max_dlp1 = std::max(max_dlp1, dlp1);
    sum_dlp1 += dlp1;
    if (dlp1 > kTop1LogprobTolerance)
      fail("step " + std::to_string(s) + ": |dlogprob| of llama.cpp's top token " + std::to_string(dlp1) + " > " +
           std::to_string(kTop1LogprobTolerance));
    for (size_t k = 0; k < top.size(); ++k) {
      const double dp = std::fabs(std::exp(lp(top[k])) - std::exp(top_lp[k]));
      max_dp5 = std::max(max_dp5, dp);
      if (dp > kTop5ProbTolerance)
        fail("step " + std::to_string(s) + ": |dp| of llama.cpp's top-" + std::to_string(k + 1) + " token " +
             std::to_string(dp) + " > " + std::to_string(kTop5ProbTolerance));
    }
    if (ours != theirs) {
      if (first_diff < 0) first_diff = int64_t(s);
      const bool open_for_llama = gap < kTieGap || unsettled.count(s);
      const bool close_for_us = lp(ours) - lp(theirs) < kTieGap;
      if (open_for_llama && close_for_us) {
        ++near_ties;
      } else {
        fail("step " + std::to_string(s) + ": greedy token " + std::to_string(ours) + " (logprob " +
             std::to_string(lp(ours)) + "), llama.cpp " + std::to_string(theirs) + " (logprob " +
             std::to_string(top_lp[0]) + ", ours " + std::to_string(lp(theirs)) + "); llama.cpp's top-2 gap " +
             std::to_string(gap) + ", its other configurations " + (unsettled.count(s) ? "flip" : "agree on") +
             " this step");
      }
    }
    if (eog_step) {
      if (!tokenizer_->is_eog(theirs)) fail("llama.cpp's end token " + std::to_string(theirs) + " is not EOG for us");
      break;
    }
    // Go on with llama.cpp's token, so that one near-tie does not hide the steps after it.
    if (Status st = ctx.eval(std::span<const int32_t>(&want[s], 1)); !st.is_ok()) {
      fail(st.to_string());
      return out;
    }
  }
  const double mean_dlp1 = sum_dlp1 / std::max(1, n_steps);
  if (mean_dlp1 > kTop1LogprobMeanTolerance)
    fail("mean |dlogprob| of llama.cpp's top token " + std::to_string(mean_dlp1) + " > " +
         std::to_string(kTop1LogprobMeanTolerance));
  out.identical = first_diff < 0;
  std::printf("gemma3 golden %-13s %3zu+%2zu tok: %-30s near-ties %d | top-1 |dlogprob| max %.3f mean %.3f | "
              "top-5 |dp| max %.3f\n",
              name.c_str(), ids.size(), want.size(),
              out.identical ? "identical" : ("first difference at step " + std::to_string(first_diff)).c_str(),
              near_ties, max_dlp1, mean_dlp1, max_dp5);
  return out;
}

TEST_P(Gemma3Golden, GreedyMatchesLlamaCpp) {
  if (const std::string why = unavailable(); !why.empty()) {
    if (std::getenv("TIERSERVE_REQUIRE_DEFAULT_MODEL") || std::filesystem::exists(default_model_path())) {
      FAIL() << why;
    }
    GTEST_SKIP() << why;
  }
  for (const std::string& f : run(GetParam()).failures) ADD_FAILURE() << GetParam() << ": " << f;
}

INSTANTIATE_TEST_SUITE_P(Prompts, Gemma3Golden, ::testing::ValuesIn(golden_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// The acceptance criterion: identical free-running greedy output on >= 8 prompts, plain and
// chat among them.
class Gemma3GoldenSummary : public Gemma3Golden {};

TEST_F(Gemma3GoldenSummary, AtLeastEightPromptsIdentical) {
  if (const std::string why = unavailable(); !why.empty()) {
    if (std::getenv("TIERSERVE_REQUIRE_DEFAULT_MODEL") || std::filesystem::exists(default_model_path())) {
      FAIL() << why;
    }
    GTEST_SKIP() << why;
  }
  int identical = 0, plain = 0, chat = 0;
  std::string which;
  for (const auto& n : golden_names()) {
    const Outcome& o = run(n);
    if (!o.identical) continue;
    ++identical;
    plain += o.kind == "plain";
    chat += o.kind == "chat";
    which += " " + n;
  }
  std::printf("gemma3 golden: %d of %zu prompts identical to llama.cpp:%s\n", identical, golden_names().size(),
              which.c_str());
  EXPECT_GE(identical, kMinIdenticalPrompts);
  EXPECT_GE(plain, 1);
  EXPECT_GE(chat, 1);
}

// The goldens themselves: >= 8 prompts, plain and chat, 32..64 generated tokens each unless
// llama.cpp stopped at an end-of-generation token, one prompt longer than the window.
TEST(Gemma3GoldenFiles, CoverPlainChatAndLongPrompts) {
  const auto names = golden_names();
  ASSERT_GE(names.size(), 8u) << "goldens in " << golden_dir() << " (scripts/oracle/gen_gemma3_golden.py)";
  int plain = 0, chat = 0;
  size_t longest = 0;
  for (const auto& n : names) {
    const auto g = read_golden(n);
    const std::string kind = g.at("kind").get<std::string>();
    plain += kind == "plain";
    chat += kind == "chat";
    longest = std::max(longest, g.at("prompt_ids").size());
    const size_t n_tok = g.at("tokens").size();
    if (g.at("stop_reason").get<std::string>() == "length") {
      EXPECT_GE(n_tok, 32u) << n;
      EXPECT_LE(n_tok, 64u) << n;
    }
  }
  EXPECT_GE(plain, 3);
  EXPECT_GE(chat, 3);
  EXPECT_GT(longest, 512u) << "no prompt exceeds gemma3's sliding window";
}

}  // namespace
}  // namespace ts
