// Our logits against llama.cpp's, for every architecture x tensor type, on random-weight
// "tiny" models (dim 256, 2 layers, 4 heads / 2 KV heads, vocabulary 1024).
//
// The goldens in tests/data/golden/oracle/<arch>-<type>.json hold llama.cpp's logits at
// every position of a 12-token prompt (scripts/oracle/gen_logits.py, pinned
// llama-cpp-python, F16 KV cache, no flash attention). This test rebuilds the same model
// with the built `tierserve make-model` (the bytes must match the golden's hash, else the
// maker changed and the goldens must be regenerated), evaluates the prompt in one batch
// with all logits, and checks at every position:
//   - max |our logit - llama.cpp's| and the mean over all logits within the type's
//     tolerances (kTolerances below, with the measurements they come from), and
//   - the same argmax, unless llama.cpp's top two logits are closer than that tolerance
//     (then the argmax is a coin toss of rounding; ours must still be one of them).
// A mismatch fails; nothing is skipped.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model.h"
#include "models/register.h"

namespace ts {
namespace {

// Tolerances, per weight type, on max |Δlogit| and on mean |Δlogit| (logits have a standard
// deviation of about 2).
//
// Why they are not ~1e-5: llama.cpp rounds activations before every product (to Q8_0/Q8_1
// for the 32-blocks, Q8_K for the K-quants, F16/BF16 for those weights), stores K and V as
// F16, and rounds Q and the attention weights to F16 for the two attention products. A
// float64 reference with exactly those roundings (scripts/oracle/numpy_ref.py) reproduces
// llama.cpp to < 1e-5 on 19 of the 27 quantized/BF16 goldens, but on the other 8 one
// activation lands on the other side of a rounding boundary (the reference's norms and
// sums are not bit-identical to llama.cpp's), and one such one-step change moves the
// logits by up to 0.08 after the later layers re-quantize. So any engine that is not
// bit-identical to llama.cpp differs by up to ~0.25 on quantized types.
//
// Measured max |Δ| (mean |Δ|) over the 3 architectures, 12 positions x 1024 logits:
//   type      tierserve (F32 KV cache)   float64 reference      reference + llama.cpp's roundings
//   f32       0.0077 (0.0010)            0.0044                 0.0015
//   f16       0.0104 (0.0016)            0.0095                 0.0046
//   bf16      0.0426 (0.0078)            0.0465                 0.023
//   quantized 0.214  (0.037)             0.252  (0.045)         0.00000 .. 0.20
// The tolerances leave ~1.5-2x over the worst of these. For scale, bugs injected into the
// reference give, on quantized models: RoPE style swapped max 4.3 / mean 0.53, RoPE base
// 10x off 1.4-2.5 / 0.14-0.24, QKV biases or QK-norm dropped 2.2-5.5 / 0.24-0.80,
// RMS epsilon 1e-3 0.22-0.53 / 0.05-0.08.
struct Tolerance {
  const char* type;
  float max_abs;
  float mean_abs;
};
constexpr Tolerance kTolerances[] = {
    {"f32", 0.02f, 0.003f},  {"f16", 0.025f, 0.004f}, {"bf16", 0.08f, 0.015f}, {"q8_0", 0.4f, 0.07f},
    {"q4_0", 0.4f, 0.07f},   {"q4_1", 0.4f, 0.07f},   {"q5_0", 0.4f, 0.07f},   {"q5_1", 0.4f, 0.07f},
    {"q4_k", 0.4f, 0.07f},   {"q5_k", 0.4f, 0.07f},   {"q6_k", 0.4f, 0.07f},
};

const char* const kArchs[] = {"llama", "qwen2", "qwen3"};

const Tolerance* tolerance(const std::string& type) {
  for (const auto& t : kTolerances)
    if (type == t.type) return &t;
  return nullptr;
}

std::vector<uint8_t> base64_decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) continue;  // padding
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(uint8_t(acc >> bits));
    }
  }
  return out;
}

std::string fnv1a64_hex(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  uint64_t h = 0xCBF29CE484222325ull;
  char buf[1 << 16];
  while (f.read(buf, sizeof buf) || f.gcount() > 0) {
    for (std::streamsize i = 0; i < f.gcount(); ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 0x100000001B3ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

struct Case {
  std::string arch, type;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.arch << " " << c.type; }

class OracleLogits : public ::testing::TestWithParam<Case> {};

TEST_P(OracleLogits, MatchLlamaCpp) {
  const Case& c = GetParam();
  const std::string golden_path =
      std::string(TS_SOURCE_DIR) + "/tests/data/golden/oracle/" + c.arch + "-" + c.type + ".json";
  std::ifstream in(golden_path);
  ASSERT_TRUE(in.good()) << "missing golden " << golden_path << " (scripts/oracle/gen_logits.py)";
  const auto g = nlohmann::json::parse(in);
  const auto& mi = g.at("model");

  // The same model, rebuilt.
  const std::string dir = std::string(TS_BINARY_DIR) + "/oracle_logits_test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + c.arch + "-" + c.type + ".gguf";
  std::string cmd = std::string("'") + TS_TIERSERVE_BIN + "'";
  for (const auto& a : mi.at("make_model_args")) cmd += " '" + a.get<std::string>() + "'";
  cmd += " -o '" + path + "' 2>/dev/null";
  const int st = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << cmd;
  ASSERT_EQ(std::filesystem::file_size(path), mi.at("file_bytes").get<uint64_t>())
      << "make-model output changed: regenerate the goldens (scripts/oracle/gen_logits.py)";
  ASSERT_EQ(fnv1a64_hex(path), mi.at("fnv1a64").get<std::string>())
      << "make-model output changed: regenerate the goldens (scripts/oracle/gen_logits.py)";

  models::register_all();
  engine::ModelOptions opts;
  opts.attn_numerics = ops::AttnNumerics::kSoftmaxF16;  // the goldens were made without flash attention
  opts.n_threads = 2;
  auto model = engine::Model::load(path, opts);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto ctx = engine::Context::create(**model, 64);
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().to_string();
  const auto ids = g.at("prompt_ids").get<std::vector<int32_t>>();
  const Status st_eval = (*ctx)->eval(ids, /*all_logits=*/true);
  ASSERT_TRUE(st_eval.is_ok()) << st_eval.to_string();

  const int64_t n_vocab = g.at("n_vocab").get<int64_t>();
  const Tolerance* tp = tolerance(c.type);
  ASSERT_TRUE(tp) << "no tolerance for " << c.type;
  const float tol = tp->max_abs;
  const auto& rows = g.at("logits");
  ASSERT_EQ(rows.size(), ids.size());
  double max_diff = 0, sum_diff = 0;
  int argmax_same = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto bytes = base64_decode(rows[i].get<std::string>());
    ASSERT_EQ(bytes.size(), size_t(n_vocab) * 4);
    std::vector<float> ref(static_cast<size_t>(n_vocab));
    std::memcpy(ref.data(), bytes.data(), bytes.size());  // little-endian, as x86 and arm64
    const auto ours = (*ctx)->logits(int64_t(i));
    ASSERT_EQ(int64_t(ours.size()), n_vocab);
    double row_max = 0;
    for (int64_t v = 0; v < n_vocab; ++v) {
      const double d = std::fabs(double(ours[size_t(v)]) - double(ref[size_t(v)]));
      row_max = std::max(row_max, std::isnan(d) ? INFINITY : d);
      sum_diff += d;
    }
    max_diff = std::max(max_diff, row_max);
    EXPECT_LE(row_max, tol) << "position " << i;
    const size_t ref_best = size_t(std::max_element(ref.begin(), ref.end()) - ref.begin());
    const size_t our_best = size_t(std::max_element(ours.begin(), ours.end()) - ours.begin());
    if (our_best == ref_best) {
      ++argmax_same;
    } else {
      EXPECT_LE(ref[ref_best] - ref[our_best], tol)
          << "position " << i << ": argmax " << our_best << ", llama.cpp " << ref_best;
    }
  }
  const double mean_diff = sum_diff / double(ids.size() * size_t(n_vocab));
  EXPECT_LE(mean_diff, tp->mean_abs) << "mean |dlogit| over all positions";
  std::printf("oracle %-5s %-5s max|dlogit| %.3g (tolerance %.3g), mean %.3g (tolerance %.3g), argmax same %d/%zu\n",
              c.arch.c_str(), c.type.c_str(), max_diff, double(tol), mean_diff, double(tp->mean_abs), argmax_same,
              ids.size());
  RecordProperty("max_abs_dlogit", std::to_string(max_diff));
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const char* a : kArchs)
    for (const auto& t : kTolerances) out.push_back({a, t.type});
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllArchsAndTypes, OracleLogits, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.arch + "_" + info.param.type;
                         });

}  // namespace
}  // namespace ts
