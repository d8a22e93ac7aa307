// The model maker: shapes, type rules, weights and the GGUF layout (see make_model.h).
#include "models/make_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <thread>

#include "core/fp16.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "engine/arch_names.h"
#include "gguf/gguf.h"
#include "kernels/traits.h"

namespace ts::models {
namespace {

namespace nm = ts::engine::names;

// Real shapes: llama2.c's stories15M / stories110M and Qwen2.5-0.5B. The training context
// of the small ones is raised to 2048 so benchmarks can run 512 tokens at depth 512.
// "tiny" is for fast tests: every row length is a multiple of 256 so K-quants apply
// without fallbacks, and the vocabulary is small enough for golden logit files.
constexpr Shape kShapes[] = {
    {"tiny", 256, 2, 4, 2, 512, 1024, 2048},
    {"15m", 288, 6, 6, 6, 768, 32000, 2048},
    {"110m", 768, 12, 12, 12, 2048, 32000, 2048},
    {"0.5b", 896, 24, 14, 2, 4864, 151936, 32768},
};

// general.file_type values are llama.cpp's llama_ftype; plain K-quant types use the "S"
// variants (the closest named mixes), though every 2-D weight gets the plain type.
constexpr TypeSpec kTypes[] = {
    {"f32", DType::F32, false, 0},     {"f16", DType::F16, false, 1},
    {"bf16", DType::BF16, false, 32},  {"q8_0", DType::Q8_0, false, 7},
    {"q4_0", DType::Q4_0, false, 2},   {"q4_1", DType::Q4_1, false, 3},
    {"q5_0", DType::Q5_0, false, 8},   {"q5_1", DType::Q5_1, false, 9},
    {"q4_k", DType::Q4_K, false, 14},  {"q5_k", DType::Q5_K, false, 16},
    {"q6_k", DType::Q6_K, false, 18},  {"q4_k_m", DType::Q4_K, true, 15},
    {"q5_k_m", DType::Q5_K, true, 17},
};

struct ArchInfo {
  Arch arch;
  const char* name;
  float rope_theta;
  float rms_eps;
  bool qkv_bias;
  bool qk_norm;
  bool tied;      // no output.weight: the token embedding doubles as the output matrix
  bool bpe_vocab; // gpt2/qwen2 byte-level BPE, else SentencePiece
};

constexpr ArchInfo kArchs[] = {
    {Arch::kLlama, "llama", 10000.0f, 1e-5f, false, false, false, false},
    {Arch::kQwen2, "qwen2", 1000000.0f, 1e-6f, true, false, true, true},
    {Arch::kQwen3, "qwen3", 1000000.0f, 1e-6f, false, true, true, true},
};

const ArchInfo& arch_info(Arch a) {
  for (const auto& i : kArchs)
    if (i.arch == a) return i;
  return kArchs[0];
}

int64_t block_size(DType t) {
  const auto l = dtype_layout(uint32_t(t));
  return l ? int64_t(l->block_size) : 1;
}

// llama.cpp's choice of the layers that get more bits in the _M mixes: the first and last
// eighth, and every third layer in between.
bool use_more_bits(int64_t i_layer, int64_t n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}

// An approximately standard normal value from 64 random bits: the sum of four uniform
// 16-bit integers (Irwin-Hall), centred and scaled to unit variance. Integer arithmetic and
// one exact float conversion, so every platform gets the same bits; tails end at ±3.46.
inline float approx_normal(uint64_t r) {
  const int64_t s = int64_t(r & 0xFFFF) + int64_t((r >> 16) & 0xFFFF) + int64_t((r >> 32) & 0xFFFF) +
                    int64_t(r >> 48);
  constexpr float kInvStd = 1.0f / 37837.2273f;  // sqrt(4 * (65536^2 - 1) / 12)
  return float(2 * s - 262140) * (0.5f * kInvStd);
}

constexpr int64_t kRowsPerChunk = 16;  // the unit of parallel work and of RNG streams

void add_vocab(gguf::Writer& w, const Vocab& v);

}  // namespace

uint64_t tensor_seed(uint64_t seed, size_t index) { return seed + index * 0x632BE59BD9B4E019ull; }

// Chunks of rows are independent (own RNG stream), so the bytes do not depend on how the
// pool splits them.
std::vector<uint8_t> generate_tensor(const TensorSpec& t, uint64_t seed, ThreadPool& pool) {
  const int64_t n_cols = t.ne[0];
  int64_t n_rows = 1;
  for (size_t i = 1; i < t.ne.size(); ++i) n_rows *= t.ne[i];
  const int64_t row_bytes = kernels::row_bytes(t.type, n_cols);
  std::vector<uint8_t> out(size_t(row_bytes * n_rows));
  const int64_t n_chunks = (n_rows + kRowsPerChunk - 1) / kRowsPerChunk;
  const uint64_t name_hash = fnv1a(t.name);
  pool.parallel_for(n_chunks, 1, [&](int64_t c0, int64_t c1, int) {
    std::vector<float> row(static_cast<size_t>(n_cols));
    for (int64_t c = c0; c < c1; ++c) {
      Rng rng(seed * 0x9E3779B97F4A7C15ull ^ name_hash ^ (uint64_t(c) * 0xD1B54A32D192ED03ull));
      const int64_t r1 = std::min(n_rows, (c + 1) * kRowsPerChunk);
      for (int64_t r = c * kRowsPerChunk; r < r1; ++r) {
        for (auto& x : row) x = t.mean + t.std * approx_normal(rng.next_u64());
        uint8_t* dst = out.data() + r * row_bytes;
        switch (t.type) {
          case DType::F32:
            std::memcpy(dst, row.data(), size_t(row_bytes));
            break;
          case DType::F16:
            for (int64_t i = 0; i < n_cols; ++i) {
              const uint16_t h = f32_to_fp16(row[size_t(i)]);
              std::memcpy(dst + 2 * i, &h, 2);
            }
            break;
          case DType::BF16:
            for (int64_t i = 0; i < n_cols; ++i) {
              const uint16_t h = f32_to_bf16(row[size_t(i)]);
              std::memcpy(dst + 2 * i, &h, 2);
            }
            break;
          default:  // the reference quantizer: the same bytes on every CPU
            kernels::ref::from_float(t.type, row.data(), dst, n_cols);
            break;
        }
      }
    }
  });
  return out;
}

std::vector<TensorSpec> decoder_tensors(const DecoderDims& d, const std::function<DType(Role, int64_t, int64_t)>& type_of) {
  std::vector<TensorSpec> specs;
  const int64_t n_q = d.n_head * d.head_dim, n_kv = d.n_head_kv * d.head_dim;
  const auto weight = [&](std::string name, Role role, int64_t layer, int64_t n_in, int64_t n_out, float std) {
    specs.push_back({std::move(name), {n_in, n_out}, type_of(role, layer, n_in), 0.0f, std});
  };
  const auto vec = [&](std::string name, int64_t n, float mean, float std) {
    specs.push_back({std::move(name), {n}, DType::F32, mean, std});
  };
  weight(nm::kTokenEmbd, Role::kTokenEmbd, 0, d.n_embd, d.n_vocab, d.embd_std);
  for (int il = 0; il < int(d.n_layer); ++il) {
    const auto n = [il](const char* fmt) { return nm::tensor(fmt, il); };
    vec(n(nm::kAttnNorm), d.n_embd, 1.0f, 0.1f);
    weight(n(nm::kAttnQ), Role::kAttnQ, il, d.n_embd, n_q, 1.0f / std::sqrt(float(d.n_embd)));
    weight(n(nm::kAttnK), Role::kAttnK, il, d.n_embd, n_kv, 1.0f / std::sqrt(float(d.n_embd)));
    weight(n(nm::kAttnV), Role::kAttnV, il, d.n_embd, n_kv, 1.0f / std::sqrt(float(d.n_embd)));
    if (d.qkv_bias) {
      vec(n(nm::kAttnQBias), n_q, 0.0f, 0.2f);
      vec(n(nm::kAttnKBias), n_kv, 0.0f, 0.2f);
      vec(n(nm::kAttnVBias), n_kv, 0.0f, 0.2f);
    }
    if (d.qk_norm) {
      vec(n(nm::kAttnQNorm), d.head_dim, 1.0f, 0.1f);
      vec(n(nm::kAttnKNorm), d.head_dim, 1.0f, 0.1f);
    }
    weight(n(nm::kAttnOut), Role::kAttnOut, il, n_q, d.n_embd, 1.0f / std::sqrt(float(n_q)));
    vec(n(nm::kFfnNorm), d.n_embd, 1.0f, 0.1f);
    weight(n(nm::kFfnGate), Role::kFfnGate, il, d.n_embd, d.n_ff, 1.0f / std::sqrt(float(d.n_embd)));
    weight(n(nm::kFfnUp), Role::kFfnUp, il, d.n_embd, d.n_ff, 1.0f / std::sqrt(float(d.n_embd)));
    weight(n(nm::kFfnDown), Role::kFfnDown, il, d.n_ff, d.n_embd, 1.0f / std::sqrt(float(d.n_ff)));
  }
  vec(nm::kOutputNorm, d.n_embd, 1.0f, 0.1f);
  if (!d.tied) weight(nm::kOutput, Role::kOutput, 0, d.n_embd, d.n_vocab, d.output_std);
  return specs;
}

namespace {

void add_vocab(gguf::Writer& w, const Vocab& v) {
  w.add_string("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w.add_string("tokenizer.ggml.pre", v.pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.add_f32_array("tokenizer.ggml.scores", v.scores);
  w.add_i32_array("tokenizer.ggml.token_type", v.types);
  if (!v.merges.empty()) w.add_string_array("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos));
  if (v.eos >= 0) w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos));
  if (v.unk >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", uint32_t(v.unk));
  if (v.pad >= 0) w.add_u32("tokenizer.ggml.padding_token_id", uint32_t(v.pad));
  w.add_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
  if (v.model == "llama") w.add_bool("tokenizer.ggml.add_space_prefix", true);
}

}  // namespace

std::optional<Arch> arch_from_name(std::string_view name) {
  for (const auto& a : kArchs)
    if (name == a.name) return a.arch;
  return std::nullopt;
}

const char* arch_name(Arch a) { return arch_info(a).name; }

std::optional<Shape> shape_from_name(std::string_view name) {
  for (const auto& s : kShapes)
    if (name == s.name) return s;
  return std::nullopt;
}

std::optional<TypeSpec> type_from_name(std::string_view name) {
  for (const auto& t : kTypes)
    if (name == t.name) return t;
  return std::nullopt;
}

std::vector<std::string> shape_names() {
  std::vector<std::string> out;
  for (const auto& s : kShapes) out.emplace_back(s.name);
  return out;
}

std::vector<std::string> type_names() {
  std::vector<std::string> out;
  for (const auto& t : kTypes) out.emplace_back(t.name);
  return out;
}

DType weight_type(const TypeSpec& spec, Role role, int64_t layer, int64_t n_layer, int64_t n_cols, bool tied) {
  DType t = spec.base;
  if (spec.mix) {
    // llama.cpp's llama_tensor_get_type_impl for Q4_K_M / Q5_K_M on a dense model.
    if (role == Role::kOutput || (tied && role == Role::kTokenEmbd)) {
      t = n_cols % block_size(spec.base) != 0 ? DType::Q8_0 : DType::Q6_K;
    } else if ((role == Role::kAttnV || role == Role::kFfnDown) && use_more_bits(layer, n_layer)) {
      t = DType::Q6_K;
    }
  }
  // llama.cpp's tensor_type_fallback: rows that do not fill whole blocks.
  if (n_cols % block_size(t) != 0) {
    switch (t) {
      case DType::Q4_K: t = DType::Q5_0; break;
      case DType::Q5_K: t = DType::Q5_1; break;
      case DType::Q6_K: t = DType::Q8_0; break;
      default: break;
    }
    if (n_cols % block_size(t) != 0) t = DType::F16;
  }
  return t;
}

Status make_model(const MakeModelOptions& opts, const std::string& path) {
  const auto t_start = std::chrono::steady_clock::now();
  const ArchInfo& ai = arch_info(opts.arch);
  const Shape& s = opts.shape;
  if (s.n_embd % s.n_head != 0 || s.n_head % s.n_head_kv != 0)
    return invalid_argument("shape '" + std::string(s.name) + "': heads do not divide the embedding");
  const int64_t head_dim = s.n_embd / s.n_head;
  const std::string arch = ai.name;

  Result<Vocab> vocab = ai.bpe_vocab ? make_bpe_vocab(s.n_vocab) : make_spm_vocab(s.n_vocab);
  if (!vocab.is_ok()) return vocab.status();

  // --- tensors, in the order llama.cpp's converters write them ---
  // Scales keep activations near unit variance: 1/sqrt(fan_in) for projections, so
  // attention scores are ~N(0, 1); the embedding/output scale gives logits with a standard
  // deviation of about 2, far from uniform but without saturating the softmax.
  const DecoderDims dims{s.n_embd,  s.n_layer,   s.n_head,   s.n_head_kv, head_dim,
                         s.n_ff,    s.n_vocab,   ai.tied,    ai.qkv_bias, ai.qk_norm,
                         2.0f / std::sqrt(float(s.n_embd)), 2.0f / std::sqrt(float(s.n_embd))};
  const std::vector<TensorSpec> specs = decoder_tensors(dims, [&](Role role, int64_t layer, int64_t n_cols) {
    return weight_type(opts.type, role, layer, s.n_layer, n_cols, ai.tied);
  });

  for (const auto& t : specs)
    if (t.type != DType::F32 && t.type != DType::F16 && t.type != DType::BF16 && !kernels::is_supported(t.type))
      return unimplemented(std::string("no quantizer for tensor type ") + dtype_name(t.type));

  // --- metadata ---
  gguf::Writer w;
  w.add_string(nm::kArchitecture, arch);
  char name[160];
  std::snprintf(name, sizeof name, "tierserve random %s %s %s seed %llu", arch.c_str(), s.name, opts.type.name,
                static_cast<unsigned long long>(opts.seed));
  w.add_string(nm::kModelName, name);
  w.add_u32("general.file_type", opts.type.file_type);
  w.add_u32("general.quantization_version", 2);
  w.add_u32(nm::key(nm::kContextLength, arch), uint32_t(s.n_ctx_train));
  w.add_u32(nm::key(nm::kEmbeddingLength, arch), uint32_t(s.n_embd));
  w.add_u32(nm::key(nm::kBlockCount, arch), uint32_t(s.n_layer));
  w.add_u32(nm::key(nm::kFeedForwardLength, arch), uint32_t(s.n_ff));
  w.add_u32(nm::key(nm::kHeadCount, arch), uint32_t(s.n_head));
  w.add_u32(nm::key(nm::kHeadCountKv, arch), uint32_t(s.n_head_kv));
  w.add_f32(nm::key(nm::kRopeFreqBase, arch), ai.rope_theta);
  w.add_f32(nm::key(nm::kRmsEps, arch), ai.rms_eps);
  w.add_u32(nm::key(nm::kRopeDimensionCount, arch), uint32_t(head_dim));
  if (ai.qk_norm) {
    w.add_u32(nm::key(nm::kKeyLength, arch), uint32_t(head_dim));
    w.add_u32(nm::key(nm::kValueLength, arch), uint32_t(head_dim));
  }
  w.add_u32(nm::key(nm::kVocabSize, arch), uint32_t(s.n_vocab));
  add_vocab(w, *vocab);
  w.add_u32("tierserve.maker_version", kMakerVersion);
  w.add_u64("tierserve.seed", opts.seed);
  w.add_string("tierserve.shape", s.name);
  w.add_string("tierserve.type", opts.type.name);

  // --- weights ---
  const int n_threads = opts.n_threads > 0 ? opts.n_threads : int(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(n_threads);
  std::map<std::string, int> type_counts;
  uint64_t n_bytes = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& t = specs[i];
    // Distinct streams per tensor: the name hash and its index both go into the seed.
    std::vector<uint8_t> data = generate_tensor(t, tensor_seed(opts.seed, i), pool);
    n_bytes += data.size();
    ++type_counts[dtype_name(t.type)];
    w.add_tensor(t.name, t.type, t.ne, std::move(data));
  }
  TS_RETURN_IF_ERROR(w.write(path));

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  std::string mix;
  for (const auto& [tn, c] : type_counts) mix += (mix.empty() ? "" : ", ") + tn + " x" + std::to_string(c);
  std::fprintf(stderr, "make-model: wrote %s (%s %s %s, seed %llu): %zu tensors, %.1f MiB [%s] in %.2f s\n",
               path.c_str(), arch.c_str(), s.name, opts.type.name, static_cast<unsigned long long>(opts.seed),
               specs.size(), double(n_bytes) / (1 << 20), mix.c_str(), secs);
  return Status::ok();
}

}  // namespace ts::models
