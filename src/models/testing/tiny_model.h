// Tiny random-weight GGUF models for the models tests (their tensors made by the model
// maker, models/make_model.h, with dimensions and breakage of the test's choosing), plus an independent reference
// forward pass in double (written from the architecture descriptions, sharing no code
// with the engine) to check llama/qwen2/qwen3 numerics end to end; and the loading and
// token helpers the models tests share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "engine/model.h"
#include "gguf/gguf.h"
#include "kernels/traits.h"
#include "models/make_model.h"

namespace ts::models::testing {

struct TinySpec {
  std::string arch = "llama";
  int n_embd = 32, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 64, n_vocab = 48;
  int head_dim = 0;  // 0: n_embd / n_head (no key_length key)
  float rope_base = 10000.0f, eps = 1e-5f;
  bool tied = false, qkv_bias = false, qk_norm = false;
  DType wtype = DType::F32;                               // type of the 2-D weights
  uint64_t seed = 1;
  std::set<std::string> skip_tensors;                     // leave these out
  std::map<std::string, std::vector<int64_t>> reshape;    // write these with another shape
  std::map<std::string, DType> retype;                    // write these with another type
  std::set<std::string> skip_keys;                        // leave these metadata keys out
};

// All weights as float (what the reference forward uses), by tensor name.
using Weights = std::map<std::string, std::vector<float>>;

inline int hd_of(const TinySpec& s) { return s.head_dim ? s.head_dim : s.n_embd / s.n_head; }

inline std::vector<float> decode(DType t, const std::vector<uint8_t>& b, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  if (t == DType::F32) std::memcpy(v.data(), b.data(), size_t(n) * 4);
  else kernels::traits(t).to_float(b.data(), v.data(), n);
  return v;
}

// Writes the model to `path` and returns its weights as the engine will see them (after
// quantization, so the reference uses exactly the same values).
inline Weights write_tiny(const TinySpec& s, const std::string& path) {
  gguf::Writer w;
  const std::string a = s.arch;
  auto key = [&](const char* k) { return a + "." + k; };
  w.add_string("general.architecture", a);
  w.add_string("general.name", "tiny-" + a);
  auto u32 = [&](const std::string& k, uint32_t v) {
    if (!s.skip_keys.count(k)) w.add_u32(k, v);
  };
  u32(key("embedding_length"), uint32_t(s.n_embd));
  u32(key("block_count"), uint32_t(s.n_layer));
  u32(key("attention.head_count"), uint32_t(s.n_head));
  u32(key("attention.head_count_kv"), uint32_t(s.n_head_kv));
  u32(key("feed_forward_length"), uint32_t(s.n_ff));
  u32(key("context_length"), 256);
  if (s.head_dim) {
    u32(key("attention.key_length"), uint32_t(s.head_dim));
    u32(key("attention.value_length"), uint32_t(s.head_dim));
  }
  if (!s.skip_keys.count(key("rope.freq_base"))) w.add_f32(key("rope.freq_base"), s.rope_base);
  if (!s.skip_keys.count(key("attention.layer_norm_rms_epsilon"))) w.add_f32(key("attention.layer_norm_rms_epsilon"), s.eps);

  // The tensors and their values come from the model maker (models/make_model.h), with
  // this spec's dimensions; then the spec's breakage (skipped, reshaped, retyped tensors).
  const int hd = hd_of(s);
  const DecoderDims dims{s.n_embd, s.n_layer, s.n_head, s.n_head_kv, hd, s.n_ff, s.n_vocab, s.tied, s.qkv_bias,
                         s.qk_norm, 1.0f, 1.0f / std::sqrt(float(s.n_embd))};
  const std::vector<TensorSpec> specs = decoder_tensors(dims, [&](Role, int64_t, int64_t) { return s.wtype; });
  ThreadPool pool(1);
  Weights ws;
  for (size_t i = 0; i < specs.size(); ++i) {
    TensorSpec t = specs[i];
    if (s.skip_tensors.count(t.name)) continue;
    if (auto it = s.retype.find(t.name); it != s.retype.end()) t.type = it->second;
    if (auto it = s.reshape.find(t.name); it != s.reshape.end()) t.ne = it->second;
    int64_t n = 1;
    for (int64_t e : t.ne) n *= e;
    std::vector<uint8_t> bytes;
    if (t.type == DType::F32 || kernels::is_supported(t.type)) {
      bytes = generate_tensor(t, tensor_seed(s.seed, i), pool);
      ws[t.name] = decode(t.type, bytes, n);
    } else {  // a type without kernels: any bytes of the right size
      const auto layout = dtype_layout(uint32_t(t.type));
      bytes.assign(size_t(dtype_row_bytes(*layout, uint64_t(t.ne[0])) * uint64_t(n / t.ne[0])), 0);
    }
    w.add_tensor(t.name, t.type, t.ne, std::move(bytes));
  }
  const Status st = w.write(path);
  (void)st;
  return ws;
}

// Reference forward: logits of every position of `tokens` (causal), in double.
inline std::vector<std::vector<double>> reference_logits(const TinySpec& s, const Weights& W,
                                                         const std::vector<int32_t>& tokens) {
  const int d = s.n_embd, hd = hd_of(s), nq = s.n_head * hd, nkv = s.n_head_kv * hd;
  const bool neox = s.arch == "qwen2" || s.arch == "qwen3";
  auto mat = [&](const std::string& name, const std::vector<double>& x, int n_out) {
    const auto& m = W.at(name);
    const int n_in = int(x.size());
    std::vector<double> y(static_cast<size_t>(n_out), 0.0);
    for (int r = 0; r < n_out; ++r)
      for (int c = 0; c < n_in; ++c) y[size_t(r)] += double(m[size_t(r * n_in + c)]) * x[size_t(c)];
    return y;
  };
  auto rms = [&](std::vector<double> x, const std::string& wname) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double sc = 1.0 / std::sqrt(ss / double(x.size()) + double(s.eps));
    const auto& w = W.at(wname);
    for (size_t i = 0; i < x.size(); ++i) x[i] *= sc * double(w[i]);
    return x;
  };
  auto rope = [&](double* v, int pos) {
    for (int i = 0; i < hd / 2; ++i) {
      const double th = pos * std::pow(double(s.rope_base), -2.0 * i / hd);
      const int a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
      const double x0 = v[a], x1 = v[b];
      v[a] = x0 * std::cos(th) - x1 * std::sin(th);
      v[b] = x0 * std::sin(th) + x1 * std::cos(th);
    }
  };
  const int T = int(tokens.size());
  std::vector<std::vector<double>> x(static_cast<size_t>(T), std::vector<double>(size_t(d)));
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < d; ++i) x[size_t(t)][size_t(i)] = W.at("token_embd.weight")[size_t(tokens[size_t(t)] * d + i)];
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    std::vector<std::vector<double>> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) {
      const auto xn = rms(x[size_t(t)], p + "attn_norm.weight");
      q[size_t(t)] = mat(p + "attn_q.weight", xn, nq);
      k[size_t(t)] = mat(p + "attn_k.weight", xn, nkv);
      v[size_t(t)] = mat(p + "attn_v.weight", xn, nkv);
      if (s.qkv_bias) {
        for (int i = 0; i < nq; ++i) q[size_t(t)][size_t(i)] += W.at(p + "attn_q.bias")[size_t(i)];
        for (int i = 0; i < nkv; ++i) k[size_t(t)][size_t(i)] += W.at(p + "attn_k.bias")[size_t(i)];
        for (int i = 0; i < nkv; ++i) v[size_t(t)][size_t(i)] += W.at(p + "attn_v.bias")[size_t(i)];
      }
      for (int h = 0; h < s.n_head; ++h) {
        if (s.qk_norm) {
          std::vector<double> hv(q[size_t(t)].begin() + h * hd, q[size_t(t)].begin() + (h + 1) * hd);
          hv = rms(hv, p + "attn_q_norm.weight");
          std::copy(hv.begin(), hv.end(), q[size_t(t)].begin() + h * hd);
        }
        rope(q[size_t(t)].data() + h * hd, t);
      }
      for (int h = 0; h < s.n_head_kv; ++h) {
        if (s.qk_norm) {
          std::vector<double> hv(k[size_t(t)].begin() + h * hd, k[size_t(t)].begin() + (h + 1) * hd);
          hv = rms(hv, p + "attn_k_norm.weight");
          std::copy(hv.begin(), hv.end(), k[size_t(t)].begin() + h * hd);
        }
        rope(k[size_t(t)].data() + h * hd, t);
      }
    }
    for (int t = 0; t < T; ++t) {
      std::vector<double> att(static_cast<size_t>(nq), 0.0);
      for (int h = 0; h < s.n_head; ++h) {
        const int g = h / (s.n_head / s.n_head_kv);
        std::vector<double> sc(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int u = 0; u <= t; ++u) {
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += q[size_t(t)][size_t(h * hd + i)] * k[size_t(u)][size_t(g * hd + i)];
          sc[size_t(u)] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[size_t(u)]);
        }
        double sum = 0;
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        for (int u = 0; u <= t; ++u)
          for (int i = 0; i < hd; ++i) att[size_t(h * hd + i)] += sc[size_t(u)] / sum * v[size_t(u)][size_t(g * hd + i)];
      }
      const auto o = mat(p + "attn_output.weight", att, d);
      for (int i = 0; i < d; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
      const auto xn = rms(x[size_t(t)], p + "ffn_norm.weight");
      auto g = mat(p + "ffn_gate.weight", xn, s.n_ff);
      const auto u = mat(p + "ffn_up.weight", xn, s.n_ff);
      for (int i = 0; i < s.n_ff; ++i) g[size_t(i)] = g[size_t(i)] / (1.0 + std::exp(-g[size_t(i)])) * u[size_t(i)];
      const auto dn = mat(p + "ffn_down.weight", g, d);
      for (int i = 0; i < d; ++i) x[size_t(t)][size_t(i)] += dn[size_t(i)];
    }
  }
  std::vector<std::vector<double>> out;
  for (int t = 0; t < T; ++t)
    out.push_back(mat(s.tied ? "token_embd.weight" : "output.weight", rms(x[size_t(t)], "output_norm.weight"), s.n_vocab));
  return out;
}

// A model loaded for a test (a test failure and null when loading fails).
inline std::unique_ptr<engine::Model> load(const std::string& path, int n_threads = 2,
                                           ops::AttnNumerics numerics = ops::AttnNumerics::kFlashF16) {
  engine::ModelOptions o;
  o.n_threads = n_threads;
  o.attn_numerics = numerics;
  auto m = engine::Model::load(path, o);
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

// n token ids drawn deterministically from [0, n_vocab).
inline std::vector<int32_t> some_tokens(int n, int n_vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t(rng.next_u64() % uint64_t(n_vocab)));
  return t;
}

}  // namespace ts::models::testing
