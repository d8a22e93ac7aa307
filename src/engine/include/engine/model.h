// The engine's public entry points for one model file: load it (mmapped, validated) and
// evaluate tokens of a sequence against a KV cache.
//
// Context, one sequence with logits rows, is what the numeric tests use; it runs on the
// batching engine (engine.h, engine.step(plan)) like everything else.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "ops/ops.h"
#include "gguf/gguf.h"

namespace ts::engine {

struct ModelOptions {
  int n_threads = 0;         // 0: one per core
  // Repack the matrices into the kernels' interleaved layout at load: faster decode, but
  // quantized weights then live in RAM as well as in the mapped file.
  bool pack_weights = true;
  // Prebuilt panels from `tierserve build` (engine/pack_file.h) instead of packing, copied
  // (copy_pack) onto the model's arena of 2 MiB pages, or used in place from the mapping.
  // Empty: MODEL.gguf.tspack beside the model, if it exists. A pack given here must exist
  // (kNotFound otherwise). A pack that is malformed or stale (built from another file or
  // by kernels with another panel layout) is ignored with a warning and the weights are
  // packed in memory, so results never depend on it.
  std::string pack_path;
  bool use_pack = true;  // false: never look for a pack (nor with pack_weights = false)
  // Copy a pack's panels onto 2 MiB pages (a copy costs a fraction of packing): this
  // kernel maps the pack file on 4 KiB pages, and Gemma 3 270M decoded 17% faster from the
  // copy (docs/pack_format.md). false: read them in place from the mapping (no copy in RAM,
  // pages shared by every process mapping the pack file).
  bool copy_pack = true;
  // The attention's numerics (ops::AttnNumerics): F32 tiles, or the rounding of one of
  // llama.cpp's two paths.
  ops::AttnNumerics attn_numerics = ops::AttnNumerics::kFlashF16;
};

class Architecture;
class PackHook;

// How the matrices got their packed panels at load.
struct PackInfo {
  std::string pack_path;     // the pack used, empty when none
  std::string pack_warning;  // why a pack that exists was not used (empty otherwise)
  int64_t n_from_pack = 0;   // matrices whose panels come from the pack (copied onto 2 MiB pages)
  int64_t n_packed = 0;      // matrices packed at load
  uint64_t bytes_from_pack = 0;
  uint64_t bytes_packed = 0;
  // Of those, the bytes in the model's arena, one mapping on 2 MiB pages (when the kernel
  // accepted MADV_HUGEPAGE: arena_huge); the rest sits in buffers of their own or in the
  // pack's mapping.
  uint64_t bytes_in_arena = 0;
  bool arena_huge = false;
  double load_ms = 0;        // Model::load wall time (parse, bind, pack or packing)
};

class ModelImpl;

// Hyperparameters read from GGUF metadata (names in engine/arch_names.h).
struct ModelConfig {
  std::string arch;        // "llama", "qwen2", "qwen3", ...
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  // Rotary embedding and normalisation (for reporting; the architecture owns the math).
  int64_t n_rot = 0;
  double rope_freq_base = 10000.0;
  double rms_eps = 1e-5;
  std::string name;        // general.name, may be empty
};

class Model {
 public:
  // Errors: kNotFound (missing file), kDataLoss (malformed GGUF, missing tensor, wrong
  // shape), kUnimplemented (unknown architecture or tensor type).
  static Result<std::unique_ptr<Model>> load(const std::string& path, const ModelOptions& opts = {});
  ~Model();

  const ModelConfig& config() const;
  const gguf::File& gguf() const;
  // Bytes of weights one decode step reads (for the achieved-GB/s figure).
  uint64_t weight_bytes() const;
  int n_threads() const;
  const Architecture& arch() const;
  ThreadPool& pool();
  ModelImpl& impl() { return *impl_; }
  const PackInfo& pack_info() const;

 private:
  friend Result<std::unique_ptr<Model>> load_model(const std::string& path, const ModelOptions& opts,
                                                   PackHook* hook);
  Model() = default;
  std::unique_ptr<ModelImpl> impl_;
};

class ContextImpl;

// One sequence on an Engine of its own (engine.h), greedy, for tests and tools that want
// logits rows: the same KV, step and forward code as serving.
class Context {
 public:
  // n_ctx <= 0: the model's training context, capped at 4096. Prompts longer than n_batch
  // are evaluated in chunks of n_batch tokens (each a batched matrix-matrix pass).
  // kInvalidArgument for n_ctx or n_batch out of range.
  static Result<std::unique_ptr<Context>> create(Model& model, int64_t n_ctx = 0, int64_t n_batch = 512);
  ~Context();

  int64_t n_ctx() const;
  int64_t n_batch() const;
  uint64_t kv_bytes() const;
  int64_t n_past() const;  // tokens already in the KV cache
  void reset();            // forget the sequence

  // Appends `tokens` at positions n_past.. and computes their logits (all rows when
  // all_logits, else only the last). kOutOfRange when the context would overflow;
  // kInvalidArgument for an id outside the vocabulary or an empty span.
  Status eval(std::span<const int32_t> tokens, bool all_logits = false);

  // Logits (n_vocab floats) of row `i` of the last eval (i = 0 is its last token when
  // !all_logits).
  std::span<const float> logits(int64_t i = 0) const;

 private:
  Context() = default;
  std::unique_ptr<ContextImpl> impl_;
};

}  // namespace ts::engine
