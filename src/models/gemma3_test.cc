// The gemma3 architecture on tiny random-weight models: against an independent
// double-precision reference (sliding-window and global layers with their own RoPE bases,
// QK-norm, pre/post norms, GELU-gated FFN, scaled embeddings, tied output), batched ==
// token by token, and load-time validation of files that claim gemma3 but are broken.
#include <gtest/gtest.h>

// Tests spell out only the fields that matter with designated initializers.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "core/rng.h"
#include "engine/model.h"
#include "ops/ops.h"
#include "gemma3.h"
#include "gguf/gguf.h"
#include "models/register.h"
#include "testing/tiny_model.h"

namespace ts::models {
namespace {

struct Spec {
  int n_embd = 32, n_layer = 4, n_head = 4, n_head_kv = 2, head_dim = 16, n_ff = 64, n_vocab = 64;
  int sliding_window = 4;          // 0: key absent
  int pattern = 2;                 // sliding_window_pattern (0: key absent, llama.cpp's 6)
  std::vector<bool> pattern_flags; // written as a bool array instead when not empty
  float rope_base = 1e6f, rope_base_swa = 100.0f;  // swa base 0: key absent (10000)
  float softcap = 0.0f;            // final_logit_softcapping (0: absent)
  float eps = 1e-6f;
  uint64_t seed = 3;
  std::set<std::string> skip_tensors;
  std::map<std::string, std::vector<int64_t>> reshape;
  std::set<std::string> skip_keys;
};

using Weights = std::map<std::string, std::vector<float>>;

std::string tmp_path(const std::string& name) { return std::string(TS_BINARY_DIR) + "/gemma3_test_" + name + ".gguf"; }

// Writes a gemma3 GGUF with F32 weights and returns them.
Weights write_gemma3(const Spec& s, const std::string& path) {
  gguf::Writer w;
  const std::string a = "gemma3";
  auto key = [&](const std::string& k) { return a + "." + k; };
  w.add_string("general.architecture", a);
  auto u32 = [&](const std::string& k, uint32_t v) {
    if (!s.skip_keys.count(k)) w.add_u32(key(k), v);
  };
  u32("embedding_length", uint32_t(s.n_embd));
  u32("block_count", uint32_t(s.n_layer));
  u32("attention.head_count", uint32_t(s.n_head));
  u32("attention.head_count_kv", uint32_t(s.n_head_kv));
  u32("feed_forward_length", uint32_t(s.n_ff));
  u32("context_length", 256);
  u32("attention.key_length", uint32_t(s.head_dim));
  u32("attention.value_length", uint32_t(s.head_dim));
  if (s.sliding_window) u32("attention.sliding_window", uint32_t(s.sliding_window));
  if (!s.pattern_flags.empty()) {
    std::vector<uint8_t> b;
    for (bool f : s.pattern_flags) b.push_back(f ? 1 : 0);
    w.add_array(key("attention.sliding_window_pattern"), gguf::ValueType::kBool, b.size(), b);
  } else if (s.pattern) {
    u32("attention.sliding_window_pattern", uint32_t(s.pattern));
  }
  w.add_f32(key("rope.freq_base"), s.rope_base);
  if (s.rope_base_swa > 0) w.add_f32(key("rope.freq_base_swa"), s.rope_base_swa);
  if (s.softcap > 0) w.add_f32(key("final_logit_softcapping"), s.softcap);
  w.add_f32(key("attention.layer_norm_rms_epsilon"), s.eps);

  // Values from the model maker's generator (models/make_model.h), F32.
  ThreadPool pool(1);
  size_t index = 0;
  Weights ws;
  auto add = [&](const std::string& name, int64_t n_cols, int64_t n_rows, float scale, float offset) {
    if (s.skip_tensors.count(name)) return;
    TensorSpec t{name, n_rows > 1 ? std::vector<int64_t>{n_cols, n_rows} : std::vector<int64_t>{n_cols},
                         DType::F32, offset, scale};
    if (auto it = s.reshape.find(name); it != s.reshape.end()) t.ne = it->second;
    std::vector<uint8_t> bytes = generate_tensor(t, tensor_seed(s.seed, index++), pool);
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    w.add_tensor(name, DType::F32, t.ne, std::move(bytes));
    ws[name] = std::move(v);
  };
  const int hd = s.head_dim, nq = s.n_head * hd, nkv = s.n_head_kv * hd;
  const float in = 1.0f / std::sqrt(float(s.n_embd));
  add("token_embd.weight", s.n_embd, s.n_vocab, 0.3f, 0.0f);
  add("output_norm.weight", s.n_embd, 1, 0.1f, 1.0f);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", s.n_embd, 1, 0.1f, 1.0f);
    add(p + "attn_q.weight", s.n_embd, nq, in, 0.0f);
    add(p + "attn_k.weight", s.n_embd, nkv, in, 0.0f);
    add(p + "attn_v.weight", s.n_embd, nkv, in, 0.0f);
    add(p + "attn_q_norm.weight", hd, 1, 0.1f, 1.0f);
    add(p + "attn_k_norm.weight", hd, 1, 0.1f, 1.0f);
    add(p + "attn_output.weight", nq, s.n_embd, 1.0f / std::sqrt(float(nq)), 0.0f);
    add(p + "post_attention_norm.weight", s.n_embd, 1, 0.1f, 0.5f);
    add(p + "ffn_norm.weight", s.n_embd, 1, 0.1f, 1.0f);
    add(p + "ffn_gate.weight", s.n_embd, s.n_ff, in, 0.0f);
    add(p + "ffn_up.weight", s.n_embd, s.n_ff, in, 0.0f);
    add(p + "ffn_down.weight", s.n_ff, s.n_embd, 1.0f / std::sqrt(float(s.n_ff)), 0.0f);
    add(p + "post_ffw_norm.weight", s.n_embd, 1, 0.1f, 0.5f);
  }
  EXPECT_TRUE(w.write(path).is_ok());
  return ws;
}

bool is_local(const Spec& s, int l) {
  if (!s.sliding_window) return false;
  if (!s.pattern_flags.empty()) return s.pattern_flags[size_t(l)];
  const int p = s.pattern ? s.pattern : 6;
  return l % p < p - 1;
}

// Gemma 3 in double, written from the model description (no engine code).
std::vector<std::vector<double>> reference_logits(const Spec& s, const Weights& W, const std::vector<int32_t>& tok) {
  const int d = s.n_embd, hd = s.head_dim, nq = s.n_head * hd, nkv = s.n_head_kv * hd, T = int(tok.size());
  using Vec = std::vector<double>;
  auto mat = [&](const std::string& name, const Vec& x, int n_out) {
    const auto& m = W.at(name);
    Vec y(static_cast<size_t>(n_out), 0.0);
    for (int r = 0; r < n_out; ++r)
      for (size_t c = 0; c < x.size(); ++c) y[size_t(r)] += double(m[size_t(r) * x.size() + c]) * x[c];
    return y;
  };
  auto rms = [&](const double* x, int n, const std::string& wname, double* y) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += x[i] * x[i];
    const double sc = 1.0 / std::sqrt(ss / n + double(s.eps));
    for (int i = 0; i < n; ++i) y[i] = x[i] * sc * double(W.at(wname)[size_t(i)]);
  };
  auto rope = [&](double* v, int pos, double base) {  // pairs (i, i + hd/2)
    for (int i = 0; i < hd / 2; ++i) {
      const double th = pos * std::pow(base, -2.0 * i / hd);
      const double x0 = v[i], x1 = v[i + hd / 2];
      v[i] = x0 * std::cos(th) - x1 * std::sin(th);
      v[i + hd / 2] = x0 * std::sin(th) + x1 * std::cos(th);
    }
  };
  auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
  const double swa_base = s.rope_base_swa > 0 ? s.rope_base_swa : 10000.0;
  std::vector<Vec> x(static_cast<size_t>(T), Vec(size_t(d)));
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < d; ++i) x[size_t(t)][size_t(i)] = W.at("token_embd.weight")[size_t(tok[size_t(t)] * d + i)] * std::sqrt(double(d));
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const bool local = is_local(s, l);
    std::vector<Vec> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) {
      Vec xn(static_cast<size_t>(d));
      rms(x[size_t(t)].data(), d, p + "attn_norm.weight", xn.data());
      q[size_t(t)] = mat(p + "attn_q.weight", xn, nq);
      k[size_t(t)] = mat(p + "attn_k.weight", xn, nkv);
      v[size_t(t)] = mat(p + "attn_v.weight", xn, nkv);
      for (int h = 0; h < s.n_head; ++h) {
        double* qh = q[size_t(t)].data() + h * hd;
        rms(qh, hd, p + "attn_q_norm.weight", qh);
        rope(qh, t, local ? swa_base : double(s.rope_base));
      }
      for (int h = 0; h < s.n_head_kv; ++h) {
        double* kh = k[size_t(t)].data() + h * hd;
        rms(kh, hd, p + "attn_k_norm.weight", kh);
        rope(kh, t, local ? swa_base : double(s.rope_base));
      }
    }
    for (int t = 0; t < T; ++t) {
      const int first = local ? std::max(0, t - s.sliding_window + 1) : 0;
      Vec att(static_cast<size_t>(nq), 0.0);
      for (int h = 0; h < s.n_head; ++h) {
        const int g = h / (s.n_head / s.n_head_kv);
        Vec sc;
        double mx = -1e300;
        for (int u = first; u <= t; ++u) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += q[size_t(t)][size_t(h * hd + i)] * k[size_t(u)][size_t(g * hd + i)];
          sc.push_back(dot / std::sqrt(double(hd)));
          mx = std::max(mx, sc.back());
        }
        double sum = 0;
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        for (int u = first; u <= t; ++u)
          for (int i = 0; i < hd; ++i)
            att[size_t(h * hd + i)] += sc[size_t(u - first)] / sum * v[size_t(u)][size_t(g * hd + i)];
      }
      Vec o = mat(p + "attn_output.weight", att, d);
      rms(o.data(), d, p + "post_attention_norm.weight", o.data());
      for (int i = 0; i < d; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      Vec xn(static_cast<size_t>(d));
      rms(x[size_t(t)].data(), d, p + "ffn_norm.weight", xn.data());
      Vec g = mat(p + "ffn_gate.weight", xn, s.n_ff);
      const Vec u = mat(p + "ffn_up.weight", xn, s.n_ff);
      for (int i = 0; i < s.n_ff; ++i) g[size_t(i)] = gelu(g[size_t(i)]) * u[size_t(i)];
      Vec f = mat(p + "ffn_down.weight", g, d);
      rms(f.data(), d, p + "post_ffw_norm.weight", f.data());
      for (int i = 0; i < d; ++i) x[size_t(t)][size_t(i)] += f[size_t(i)];
    }
  }
  std::vector<Vec> out;
  for (int t = 0; t < T; ++t) {
    Vec xn(static_cast<size_t>(d));
    rms(x[size_t(t)].data(), d, "output_norm.weight", xn.data());
    Vec lg = mat("token_embd.weight", xn, s.n_vocab);
    if (s.softcap > 0)
      for (auto& z : lg) z = s.softcap * std::tanh(z / s.softcap);
    out.push_back(std::move(lg));
  }
  return out;
}

class Gemma3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_all(); }
};

using testing::load;
using testing::some_tokens;

// All positions' logits of one batched eval.
std::vector<std::vector<float>> engine_logits(engine::Model& m, const std::vector<int32_t>& tokens) {
  auto ctx = engine::Context::create(m, 64);
  EXPECT_TRUE(ctx.is_ok());
  EXPECT_TRUE((*ctx)->eval(tokens, /*all_logits=*/true).is_ok());
  std::vector<std::vector<float>> out;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const auto l = (*ctx)->logits(int64_t(t));
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

// q, K and V are rounded to F16, the attention accumulator is F16 and GELU comes from an
// F16 table (like llama.cpp); the reference is exact, so agreement is to ~1e-3 relative.
constexpr double kTol = 3e-2;

double max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<double>>& b) {
  double worst = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t v = 0; v < a[t].size(); ++v) worst = std::max(worst, std::fabs(double(a[t][v]) - b[t][v]));
  return worst;
}

using ops::AttnNumerics;

void check_against_reference(const Spec& spec, const std::string& name,
                             AttnNumerics numerics = AttnNumerics::kFlashF16) {
  const int n_tokens = 14;
  const std::string path = tmp_path(name);
  const Weights w = write_gemma3(spec, path);
  auto model = load(path, 2, numerics);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->config().arch, "gemma3");
  EXPECT_EQ(model->config().n_vocab, spec.n_vocab);
  EXPECT_EQ(model->config().head_dim, spec.head_dim);
  const auto tokens = some_tokens(n_tokens, spec.n_vocab, spec.seed + 11);
  const auto got = engine_logits(*model, tokens);
  const auto ref = reference_logits(spec, w, tokens);
  const double worst = max_diff(got, ref);
  EXPECT_LE(worst, kTol) << name;
  std::printf("%s: max |logit - reference| = %.2e\n", name.c_str(), worst);
}

TEST_F(Gemma3Test, MatchesReference) { check_against_reference({}, "ref"); }

TEST_F(Gemma3Test, NonFlashAttentionNumericsMatchReference) {
  check_against_reference({}, "ref_softmax", AttnNumerics::kSoftmaxF16);
}
TEST_F(Gemma3Test, TiledF32NumericsMatchReference) {
  check_against_reference({.head_dim = 32}, "ref_tiled", AttnNumerics::kTiledF32);
}

TEST_F(Gemma3Test, DefaultPatternAndLocalRopeBase) {
  // 7 layers with llama.cpp's default pattern 6 (layer 5 global) and rope.freq_base_swa
  // absent (10000); a window of 3 cuts 14 tokens.
  check_against_reference({.n_layer = 7, .sliding_window = 3, .pattern = 0, .rope_base_swa = 0}, "default_pattern");
}

TEST_F(Gemma3Test, PerLayerPatternFlags) {
  check_against_reference({.n_layer = 3, .pattern_flags = {false, true, true}}, "flags");
}

TEST_F(Gemma3Test, NoSlidingWindowMeansAllGlobal) {
  check_against_reference({.sliding_window = 0}, "all_global");
}

TEST_F(Gemma3Test, FinalLogitSoftcapping) { check_against_reference({.softcap = 0.5f}, "softcap"); }

TEST_F(Gemma3Test, WindowChangesTheResult) {
  // The reference comparison is only meaningful if the window matters for these sizes.
  const Spec with{}, without{.sliding_window = 0};
  write_gemma3(with, tmp_path("win_on"));
  write_gemma3(without, tmp_path("win_off"));
  auto a = load(tmp_path("win_on")), b = load(tmp_path("win_off"));
  ASSERT_TRUE(a && b);
  const auto tokens = some_tokens(14, with.n_vocab, 5);
  const auto la = engine_logits(*a, tokens), lb = engine_logits(*b, tokens);
  // Positions inside the window agree exactly; later ones differ.
  EXPECT_EQ(la[0], lb[0]);
  std::vector<double> diff;
  for (size_t v = 0; v < la.back().size(); ++v) diff.push_back(std::fabs(la.back()[v] - lb.back()[v]));
  EXPECT_GT(*std::max_element(diff.begin(), diff.end()), 10 * kTol);
}

TEST_F(Gemma3Test, LayerKindsAndScale) {
  write_gemma3({.n_layer = 12, .pattern = 6}, tmp_path("kinds"));
  auto f = gguf::File::open(tmp_path("kinds"));
  ASSERT_TRUE(f.is_ok());
  Gemma3 g;
  ASSERT_TRUE(g.load(**f, "gemma3").is_ok());
  for (int l = 0; l < 12; ++l) EXPECT_EQ(g.is_local(l), l != 5 && l != 11) << l;
  EXPECT_EQ(g.sliding_window(), 4);
  EXPECT_FLOAT_EQ(g.attn_scale(), 0.25f);  // 1 / sqrt(head_dim 16)
}

// Also in F32 tiles, whose boundaries sit at absolute positions: windows of 21 positions,
// cut at other places by every chunk, over 45 tokens (three tiles).
TEST_F(Gemma3Test, BatchedEqualsTokenByToken) {
  for (auto [spec, numerics, n_tokens] :
       {std::tuple{Spec{.n_layer = 3, .sliding_window = 5}, AttnNumerics::kFlashF16, 20},
        std::tuple{Spec{.n_layer = 3, .head_dim = 32, .sliding_window = 21}, AttnNumerics::kTiledF32, 45}}) {
  write_gemma3(spec, tmp_path("beq"));
  for (int th : {1, 3}) {
    auto model = load(tmp_path("beq"), th, numerics);
    ASSERT_TRUE(model);
    const auto tokens = some_tokens(n_tokens, spec.n_vocab, 9);
    const auto all = engine_logits(*model, tokens);
    auto one = engine::Context::create(*model, 64);
    ASSERT_TRUE(one.is_ok());
    auto chunked = engine::Context::create(*model, 64, /*n_batch=*/7);
    ASSERT_TRUE(chunked.is_ok());
    ASSERT_TRUE((*chunked)->eval(tokens, true).is_ok());
    for (size_t t = 0; t < tokens.size(); ++t) {
      ASSERT_TRUE((*one)->eval(std::span<const int32_t>(&tokens[t], 1)).is_ok());
      const auto b = (*one)->logits(0), c = (*chunked)->logits(int64_t(t));
      for (size_t v = 0; v < all[t].size(); ++v) {
        ASSERT_EQ(all[t][v], b[v]) << th << " threads, pos " << t << " vocab " << v;
        ASSERT_EQ(all[t][v], c[v]) << th << " threads, pos " << t << " vocab " << v;
      }
    }
  }
  }
}

// The F16 GELU (llama.cpp's table) on every path: bit for bit its scalar definition,
// gelu evaluated on f16(g) in float and rounded to F16, then times u.
TEST(Gemma3Gelu, F16TableMatchesDefinition) {
  Rng rng(7);
  std::vector<float> g, u;
  for (float x : {-10.5f, -10.0f, -9.99f, -0.0f, 0.0f, 1e-8f, 9.99f, 10.0f, 11.0f, 65504.0f, -70000.0f}) g.push_back(x);
  for (int i = 0; i < 4000; ++i) g.push_back(4.0f * rng.normal());
  for (size_t i = 0; i < g.size(); ++i) u.push_back(rng.normal());
  std::vector<float> y(g.size());
  for (size_t n : {g.size(), size_t(13), size_t(7)}) {  // SIMD body and scalar tails
    ops::geglu_tanh_f16(g.data(), u.data(), y.data(), int64_t(n));
    for (size_t i = 0; i < n; ++i) {
      const float x = g[i];
      float want;
      if (x <= -10.0f) {
        want = 0.0f;
      } else if (x >= 10.0f) {
        want = x * u[i];
      } else {
        const float xh = fp16_to_f32(f32_to_fp16(x));
        const float gl = 0.5f * xh * (1.0f + std::tanh(0.79788456080286535587989211986876f * xh * (1.0f + 0.044715f * xh * xh)));
        want = fp16_to_f32(f32_to_fp16(gl)) * u[i];
      }
      ASSERT_EQ(y[i], want) << "g = " << x;
    }
  }
}

// --- files that claim gemma3 but are broken ---------------------------------------------

Status load_status(const Spec& spec, const std::string& name) {
  write_gemma3(spec, tmp_path(name));
  return engine::Model::load(tmp_path(name)).status();
}

void expect_error(const Status& st, StatusCode code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string() << " lacks '" << needle << "'";
}

TEST_F(Gemma3Test, MissingTensorIsNamed) {
  const char* const kinds[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm",
                               "attn_output", "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up",
                               "ffn_down", "post_ffw_norm"};
  for (const char* k : kinds) {
    const std::string t = std::string("blk.1.") + k + ".weight";
    expect_error(load_status({.skip_tensors = {t}}, "missing"), StatusCode::kDataLoss, "missing tensor '" + t + "'");
  }
  for (const char* t : {"token_embd.weight", "output_norm.weight"})
    expect_error(load_status({.skip_tensors = {t}}, "missing"), StatusCode::kDataLoss, std::string("'") + t + "'");
}

TEST_F(Gemma3Test, WrongShapeIsNamed) {
  const std::map<std::string, std::vector<int64_t>> cases = {
      {"blk.0.attn_q.weight", {32, 32}},           // head_dim 16 x 4 heads = 64 rows expected
      {"blk.2.attn_k_norm.weight", {32}},          // over head_dim (16)
      {"blk.3.post_ffw_norm.weight", {16}},
      {"blk.1.ffn_down.weight", {32, 64}},         // transposed
      {"blk.0.attn_output.weight", {64, 32, 1, 2}},
      {"token_embd.weight", {16, 64}},
  };
  for (const auto& [name, ne] : cases)
    expect_error(load_status({.reshape = {{name, ne}}}, "shape"), StatusCode::kDataLoss, "'" + name + "'");
}

TEST_F(Gemma3Test, BadHyperparametersAreNamed) {
  expect_error(load_status({.skip_keys = {"embedding_length"}}, "key"), StatusCode::kDataLoss,
               "gemma3.embedding_length");
  expect_error(load_status({.n_head = 4, .n_head_kv = 3}, "gqa"), StatusCode::kDataLoss, "gemma3.attention.head_count");
  expect_error(load_status({.pattern_flags = {true, false}}, "flags_len"), StatusCode::kDataLoss,
               "gemma3.attention.sliding_window_pattern");
}

}  // namespace
}  // namespace ts::models
