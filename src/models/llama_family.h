// The llama-family decoder shared by llama/mistral, qwen2 and qwen3: pre-norm blocks of
// RMSNorm -> attention (GQA, RoPE, optional QKV bias and QK-norm) -> residual ->
// RMSNorm -> SwiGLU FFN -> residual, then a final RMSNorm and the output projection (tied
// to the embedding when output.weight is absent). The per-architecture files only choose
// the variant.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/arch.h"
#include "engine/linear.h"
#include "ops/ops.h"
#include "decoder.h"

namespace ts::models {

struct LlamaVariant {
  bool neox_rope = false;      // qwen2/qwen3 rotate (i, i + n_rot/2) pairs
  bool require_qkv_bias = false;  // qwen2; llama loads them when present
  bool qk_norm = false;        // qwen3: RMSNorm of each q and k head before RoPE
};

class LlamaFamily final : public engine::Architecture {
 public:
  explicit LlamaFamily(const LlamaVariant& v) : variant_(v) {}

  Status load(const gguf::File& f, const std::string& arch) override;
  const engine::ModelConfig& config() const override { return cfg_; }
  ops::KvShape kv_shape() const override { return decoder::kv_shape(cfg_); }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  std::unique_ptr<engine::Workspace> make_workspace(int64_t max_tokens, int n_threads) const override;
  void prepare(ThreadPool& pool, const engine::ModelOptions& opts) override;
  bool forward(const engine::ForwardBatch& batch, ops::KvCache& kv, engine::Workspace& ws,
               ThreadPool& pool) const override;

 private:
  struct Layer {
    const float* attn_norm = nullptr;        // [n_embd]
    engine::Matrix wq, wk, wv, wo;           // [n_embd -> n_head*hd], [-> n_kv*hd] x2, [n_head*hd -> n_embd]
    const float* bq = nullptr;               // [n_head*hd] or null
    const float* bk = nullptr;               // [n_kv*hd] or null
    const float* bv = nullptr;               // [n_kv*hd] or null
    const float* bo = nullptr;               // [n_embd] or null
    const float* q_norm = nullptr;           // [hd] (qwen3)
    const float* k_norm = nullptr;           // [hd] (qwen3)
    const float* ffn_norm = nullptr;         // [n_embd]
    engine::Matrix gate, up, down;           // [n_embd -> n_ff] x2, [n_ff -> n_embd]
  };

  LlamaVariant variant_;
  engine::ModelConfig cfg_;
  float rms_eps_ = 1e-5f;
  ops::RopeConfig rope_;
  decoder::Embeddings embd_;
  std::vector<Layer> layers_;
  uint64_t weight_bytes_ = 0;
  ops::AttnNumerics attn_numerics_ = ops::AttnNumerics::kFlashF16;
};

}  // namespace ts::models
