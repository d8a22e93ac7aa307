// The model maker: deterministic random-weight GGUF models of real shapes, so tests and
// benchmarks never download anything (`tierserve make-model`).
//
// A model is fully determined by (arch, shape, type, seed) and the maker version: the same
// arguments give the same bytes on every machine and with any thread count. Weights are
// drawn per fixed chunk of rows from core/rng.h streams (never shared across threads) and
// converted to an approximately normal value with integer arithmetic only (no libm), so no
// platform's math library can change a bit. The vocabulary depends only on the
// architecture and its size, not on the seed.
//
// Files load in llama.cpp (the oracle of tests/oracle_logits_test.cc) and in our engine.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace ts::models {

// Bump when anything that changes the output bytes changes (weights, vocabulary, metadata),
// so stale golden files are recognisable: it is stored as `tierserve.maker_version`.
inline constexpr uint32_t kMakerVersion = 1;

enum class Arch { kLlama, kQwen2, kQwen3 };

// The size of a model. `vocab` includes every special token.
struct Shape {
  const char* name;     // "tiny", "15m", "110m", "0.5b"
  int64_t n_embd;
  int64_t n_layer;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t n_ff;
  int64_t n_vocab;
  int64_t n_ctx_train;  // written as <arch>.context_length
};

// One of the --type values: a plain tensor type for every 2-D weight, or a llama.cpp mix.
struct TypeSpec {
  const char* name;     // "q4_k_m"
  DType base;           // the type most 2-D weights get
  bool mix;             // llama.cpp's Q4_K_M / Q5_K_M rules (more bits on some tensors)
  uint32_t file_type;   // general.file_type (llama.cpp's llama_ftype)
};

std::optional<Arch> arch_from_name(std::string_view name);
const char* arch_name(Arch a);
std::optional<Shape> shape_from_name(std::string_view name);
std::optional<TypeSpec> type_from_name(std::string_view name);
std::vector<std::string> shape_names();
std::vector<std::string> type_names();

// What a 2-D weight is, for the type rules.
enum class Role { kTokenEmbd, kOutput, kAttnQ, kAttnK, kAttnV, kAttnOut, kFfnGate, kFfnUp, kFfnDown };

// The type a 2-D weight of row length `n_cols` gets: the plain type, or for a mix the rules
// of llama.cpp's llama_tensor_get_type (no imatrix, dense model): the output matrix (or the
// token embedding when tied) gets Q6_K, attn_v and ffn_down get Q6_K on the layers
// use_more_bits() picks; then llama.cpp's fallback for rows that are not a multiple of the
// block size (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, else F16).
DType weight_type(const TypeSpec& spec, Role role, int64_t layer, int64_t n_layer, int64_t n_cols, bool tied);

// A vocabulary as stored in tokenizer.ggml.* (see make_model_vocab.cc).
struct Vocab {
  std::string model;                // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
  std::string pre;                  // "qwen2" for gpt2; empty for llama
  std::vector<std::string> tokens;
  std::vector<float> scores;        // llama only
  std::vector<int32_t> types;       // tokenizer.ggml.token_type
  std::vector<std::string> merges;  // gpt2 only: "a b", in rank order
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false;
};

// SentencePiece-style vocabulary: <unk>, <s>, </s>, <0x00>..<0xFF>, the characters of the
// built-in text, pieces learned from it by pair merging (scores by merge order), then pieces
// made of two earlier pieces until `n_vocab` tokens. Requires n_vocab >= 512.
Result<Vocab> make_spm_vocab(int64_t n_vocab);
// Byte-level BPE vocabulary (Qwen2 style): 256 byte tokens, merges learned from the built-in
// text, synthetic merges of earlier tokens to fill, then <|endoftext|>, <|im_start|>,
// <|im_end|> as the last three ids. Requires n_vocab >= 512.
Result<Vocab> make_bpe_vocab(int64_t n_vocab);
// The built-in English text the vocabularies are learned from (also handy for tests).
std::string_view builtin_text();

struct MakeModelOptions {
  Arch arch = Arch::kLlama;
  Shape shape{};
  TypeSpec type{};
  uint64_t seed = 1;
  int n_threads = 0;  // 0: one per core; the output does not depend on it
};

// Writes the model to `path`. Errors: kInvalidArgument (a shape the type cannot hold),
// kIo (the file).
Status make_model(const MakeModelOptions& opts, const std::string& path);

// --- the parts make_model is made of, for writers of other files (the models tests'
// tiny models, with dimensions no Shape has and the broken files the loader must refuse).

// One tensor to generate: values = mean + std * N(0, 1)-ish, stored as `type`.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] is the row
  DType type;
  float mean;
  float std;
};

struct DecoderDims {
  int64_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab;
  bool tied, qkv_bias, qk_norm;
  float embd_std;    // the token embedding's standard deviation
  float output_std;  // the output matrix's (when not tied)
};

// The tensors of a llama-family decoder, in the order llama.cpp's converters write them;
// type_of(role, layer, row length) gives each 2-D weight's type.
std::vector<TensorSpec> decoder_tensors(const DecoderDims& d, const std::function<DType(Role, int64_t, int64_t)>& type_of);
// The seed of tensor `index` of a model made with `seed`.
uint64_t tensor_seed(uint64_t seed, size_t index);
// A tensor's bytes, deterministic in (t, seed) whatever the pool's size. t.type must be
// F32, F16, BF16 or a type with a reference quantizer.
std::vector<uint8_t> generate_tensor(const TensorSpec& t, uint64_t seed, ThreadPool& pool);

}  // namespace ts::models
