// The llama-family forward pass: against an independent double-precision reference for each
// architecture variant, batched == token-by-token, and load-time validation messages.
#include <gtest/gtest.h>

// Tests spell out only the fields that matter with designated initializers.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <cmath>
#include <string>
#include <vector>

#include "engine/arch.h"
#include "engine/model.h"
#include "models/register.h"
#include "testing/tiny_model.h"

namespace ts::models {
namespace {

using testing::TinySpec;

std::string tmp_path(const std::string& name) { return std::string(TS_BINARY_DIR) + "/models_test_" + name + ".gguf"; }

class Forward : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_all(); }
};

using testing::load;
using testing::some_tokens;

// Engine logits of all positions (one batched eval) vs the double reference.
using ops::AttnNumerics;

void check_against_reference(const TinySpec& spec, const std::string& name, double tol,
                             AttnNumerics numerics = AttnNumerics::kFlashF16) {
  const std::string path = tmp_path(name);
  const testing::Weights w = testing::write_tiny(spec, path);
  auto model = load(path, 2, numerics);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->config().arch, spec.arch);
  EXPECT_EQ(model->config().n_vocab, spec.n_vocab);
  EXPECT_EQ(model->config().head_dim, testing::hd_of(spec));
  auto ctx = engine::Context::create(*model, 64);
  ASSERT_TRUE(ctx.is_ok());
  const auto tokens = some_tokens(20, spec.n_vocab, spec.seed + 7);
  ASSERT_TRUE((*ctx)->eval(tokens, /*all_logits=*/true).is_ok());
  const auto ref = testing::reference_logits(spec, w, tokens);
  double worst = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const auto got = (*ctx)->logits(int64_t(t));
    for (int v = 0; v < spec.n_vocab; ++v) {
      const double diff = std::abs(double(got[size_t(v)]) - ref[t][size_t(v)]);
      worst = std::max(worst, diff);
      ASSERT_LE(diff, tol) << name << " pos " << t << " vocab " << v;
    }
  }
  std::printf("%s: max |logit - reference| = %.2e\n", name.c_str(), worst);
}

// K, V and Q are rounded to F16 and the attention accumulator is F16 (like llama.cpp);
// the reference is exact, so agreement is to ~1e-3 relative.
TEST_F(Forward, LlamaMatchesReference) { check_against_reference({}, "llama", 2e-2); }
TEST_F(Forward, LlamaTiedOutputMatchesReference) {
  check_against_reference({.n_head_kv = 4, .tied = true}, "llama_tied", 2e-2);
}
TEST_F(Forward, MistralIsLlama) { check_against_reference({.arch = "mistral", .n_head_kv = 1}, "mistral", 2e-2); }
TEST_F(Forward, Qwen2MatchesReference) {
  check_against_reference({.arch = "qwen2", .rope_base = 1e6f, .eps = 1e-6f, .qkv_bias = true}, "qwen2", 2e-2);
}
TEST_F(Forward, Qwen3MatchesReference) {
  // head_dim 16 with n_embd 32 and 4 heads: q is wider than the embedding, as in Qwen3.
  check_against_reference({.arch = "qwen3", .head_dim = 16, .rope_base = 1e6f, .eps = 1e-6f, .tied = true, .qk_norm = true},
                          "qwen3", 2e-2);
}
TEST_F(Forward, SoftmaxF16NumericsMatchReference) {
  check_against_reference({}, "llama_nofa", 2e-2, AttnNumerics::kSoftmaxF16);
  check_against_reference({.arch = "qwen3", .head_dim = 16, .rope_base = 1e6f, .eps = 1e-6f, .tied = true, .qk_norm = true},
                          "qwen3_nofa", 2e-2, AttnNumerics::kSoftmaxF16);
}
// F32 attention tiles: closer to the exact reference than the F16 accumulator; head sizes
// with AVX-512 kernels (32, 64) and without (16: the portable path).
TEST_F(Forward, TiledF32NumericsMatchReference) {
  check_against_reference({.n_embd = 128, .n_head = 4}, "llama_tiled", 2e-2, AttnNumerics::kTiledF32);
  check_against_reference({.n_embd = 128, .n_head = 2, .n_head_kv = 1}, "llama_tiled64", 2e-2, AttnNumerics::kTiledF32);
  check_against_reference({.arch = "qwen3", .head_dim = 16, .rope_base = 1e6f, .eps = 1e-6f, .tied = true, .qk_norm = true},
                          "qwen3_tiled", 2e-2, AttnNumerics::kTiledF32);
}
TEST_F(Forward, Q8_0WeightsMatchReference) {
  // Activations are quantized to Q8_0 too: looser.
  check_against_reference({.wtype = DType::Q8_0}, "llama_q8_0", 6e-2);
}

// Evaluating a prompt in one pass, in chunks, or one token at a time must give the same
// logits (the kernels use one summation order for any batch size).
void check_batched_equals_sequential(const std::string& path, int n_tokens, int n_vocab,
                                     AttnNumerics numerics = AttnNumerics::kFlashF16) {
  auto model = load(path, 2, numerics);
  ASSERT_TRUE(model);
  const auto tokens = some_tokens(n_tokens, n_vocab, 99);
  auto all = engine::Context::create(*model, 128);
  ASSERT_TRUE(all.is_ok());
  ASSERT_TRUE((*all)->eval(tokens, true).is_ok());
  auto chunked = engine::Context::create(*model, 128, /*n_batch=*/5);
  ASSERT_TRUE(chunked.is_ok());
  ASSERT_TRUE((*chunked)->eval(tokens, true).is_ok());
  auto one = engine::Context::create(*model, 128);
  ASSERT_TRUE(one.is_ok());
  for (int t = 0; t < n_tokens; ++t) {
    ASSERT_TRUE((*one)->eval(std::span<const int32_t>(&tokens[size_t(t)], 1)).is_ok());
    const auto a = (*all)->logits(t), b = (*one)->logits(0), c = (*chunked)->logits(t);
    for (int v = 0; v < n_vocab; ++v) {
      ASSERT_EQ(a[size_t(v)], b[size_t(v)]) << "pos " << t << " vocab " << v;
      ASSERT_EQ(a[size_t(v)], c[size_t(v)]) << "pos " << t << " vocab " << v;
    }
  }
  EXPECT_EQ((*one)->n_past(), n_tokens);
}

TEST_F(Forward, Stories260KBatchedEqualsSequential) {
  check_batched_equals_sequential(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf", 40, 512);
}
TEST_F(Forward, SoftmaxF16BatchedEqualsSequential) {
  check_batched_equals_sequential(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf", 20, 512, AttnNumerics::kSoftmaxF16);
}
TEST_F(Forward, TiledF32BatchedEqualsSequential) {
  check_batched_equals_sequential(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf", 40, 512,
                                  AttnNumerics::kTiledF32);
  const TinySpec spec{.n_embd = 128, .n_head = 4, .n_head_kv = 2};  // head size 32: the AVX-512 kernels
  testing::write_tiny(spec, tmp_path("beq_tiled"));
  check_batched_equals_sequential(tmp_path("beq_tiled"), 45, spec.n_vocab, AttnNumerics::kTiledF32);
}
TEST_F(Forward, Q8_0BatchedEqualsSequential) {
  const TinySpec spec{.arch = "qwen2", .qkv_bias = true, .wtype = DType::Q8_0};
  testing::write_tiny(spec, tmp_path("beq_q8"));
  check_batched_equals_sequential(tmp_path("beq_q8"), 30, spec.n_vocab);
}

TEST_F(Forward, ThreadCountDoesNotChangeLogits) {
  const std::string path = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
  const auto tokens = some_tokens(12, 512, 5);
  std::vector<float> first;
  for (int th : {1, 2, 3}) {
    auto model = load(path, th);
    ASSERT_TRUE(model);
    auto ctx = engine::Context::create(*model);
    ASSERT_TRUE(ctx.is_ok());
    ASSERT_TRUE((*ctx)->eval(tokens).is_ok());
    const auto l = (*ctx)->logits();
    if (first.empty()) first.assign(l.begin(), l.end());
    else EXPECT_TRUE(std::equal(first.begin(), first.end(), l.begin())) << th << " threads";
  }
}

TEST_F(Forward, ContextErrors) {
  auto model = load(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->config().n_ctx_train, 128);
  auto ctx = engine::Context::create(*model, 16);
  ASSERT_TRUE(ctx.is_ok());
  EXPECT_EQ((*ctx)->eval({}).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad = {1, 512};
  EXPECT_EQ((*ctx)->eval(bad).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> neg = {-1};
  EXPECT_EQ((*ctx)->eval(neg).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*ctx)->n_past(), 0);
  const auto t17 = some_tokens(17, 512, 1);
  EXPECT_EQ((*ctx)->eval(t17).code(), StatusCode::kOutOfRange);
  const auto t16 = some_tokens(16, 512, 1);
  EXPECT_TRUE((*ctx)->eval(t16).is_ok());
  EXPECT_EQ((*ctx)->n_past(), 16);
  const std::vector<int32_t> one = {5};
  EXPECT_EQ((*ctx)->eval(one).code(), StatusCode::kOutOfRange);
  (*ctx)->reset();
  EXPECT_EQ((*ctx)->n_past(), 0);
  EXPECT_TRUE((*ctx)->eval(one).is_ok());
  // Default context: the model's 128; bad sizes are rejected.
  auto dflt = engine::Context::create(*model);
  ASSERT_TRUE(dflt.is_ok());
  EXPECT_EQ((*dflt)->n_ctx(), 128);
  EXPECT_EQ(engine::Context::create(*model, 16, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine::Context::create(*model, int64_t(1) << 40).status().code(), StatusCode::kInvalidArgument);
}

// --- load-time validation ----------------------------------------------------------------

Status load_status(const TinySpec& spec, const std::string& name) {
  testing::write_tiny(spec, tmp_path(name));
  auto m = engine::Model::load(tmp_path(name));
  return m.status();
}

void expect_error(const Status& st, StatusCode code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string() << " lacks '" << needle << "'";
}

TEST_F(Forward, UnknownArchitecture) {
  expect_error(load_status({.arch = "foo"}, "arch_foo"), StatusCode::kUnimplemented, "unsupported architecture 'foo'");
}

TEST_F(Forward, MissingTensorIsNamed) {
  expect_error(load_status({.skip_tensors = {"blk.1.ffn_up.weight"}}, "missing"), StatusCode::kDataLoss,
               "'blk.1.ffn_up.weight'");
  expect_error(load_status({.arch = "qwen2", .qkv_bias = true, .skip_tensors = {"blk.0.attn_k.bias"}}, "missing_bias"),
               StatusCode::kDataLoss, "'blk.0.attn_k.bias'");
  expect_error(load_status({.arch = "qwen3", .qk_norm = false}, "missing_qknorm"), StatusCode::kDataLoss,
               "'blk.0.attn_q_norm.weight'");
}

TEST_F(Forward, WrongShapeIsNamed) {
  expect_error(load_status({.reshape = {{"blk.0.attn_k.weight", {32, 24}}}}, "shape"), StatusCode::kDataLoss,
               "'blk.0.attn_k.weight' has shape [32, 24], expected [32, 16]");
  expect_error(load_status({.reshape = {{"output_norm.weight", {31}}}}, "shape_norm"), StatusCode::kDataLoss,
               "'output_norm.weight'");
}

TEST_F(Forward, UnsupportedTensorType) {
  expect_error(load_status({.retype = {{"blk.0.ffn_gate.weight", DType::I32}}}, "type_i32"), StatusCode::kUnimplemented,
               "'blk.0.ffn_gate.weight'");
  expect_error(load_status({.retype = {{"blk.0.attn_norm.weight", DType::F16}}}, "type_norm"),
               StatusCode::kUnimplemented, "'blk.0.attn_norm.weight'");
}

TEST_F(Forward, BadHyperparameters) {
  expect_error(load_status({.skip_keys = {"llama.block_count"}}, "no_blocks"), StatusCode::kDataLoss,
               "'llama.block_count'");
  expect_error(load_status({.n_head = 4, .n_head_kv = 3}, "gqa"), StatusCode::kDataLoss, "head_count");
}

TEST_F(Forward, NotAGgufFile) {
  const std::string path = std::string(TS_BINARY_DIR) + "/models_test_garbage.gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_TRUE(f);
  std::fputs("this is not a model", f);
  std::fclose(f);
  EXPECT_EQ(engine::Model::load(path).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(engine::Model::load(path + ".missing").status().code(), StatusCode::kNotFound);
}

TEST_F(Forward, RegistryListsArchitectures) {
  register_all();  // idempotent
  const auto names = engine::registered_architectures();
  for (const char* a : {"llama", "mistral", "qwen2", "qwen3"})
    EXPECT_NE(std::find(names.begin(), names.end(), a), names.end()) << a;
  EXPECT_EQ(engine::find_architecture("gpt-j"), nullptr);
}

TEST_F(Forward, WeightBytesCountEveryMatrixOnce) {
  const TinySpec spec{};
  testing::write_tiny(spec, tmp_path("bytes"));
  auto model = load(tmp_path("bytes"));
  ASSERT_TRUE(model);
  const int hd = testing::hd_of(spec);
  const uint64_t per_layer = uint64_t(spec.n_embd) * (spec.n_head * hd * 2 + spec.n_head_kv * hd * 2) +
                             uint64_t(3) * spec.n_embd * spec.n_ff + 2 * uint64_t(spec.n_embd);
  const uint64_t expect = 4 * (per_layer * spec.n_layer + uint64_t(spec.n_embd) * spec.n_vocab + spec.n_embd +
                               spec.n_embd /* one embedding row */);
  EXPECT_EQ(model->weight_bytes(), expect);
}

}  // namespace
}  // namespace ts::models
