// Gemma 3 (general.architecture "gemma3"), the default model's architecture.
//
// Differences from the llama family, each as llama.cpp runs it (the numerics we match):
//   - the embedding row is scaled by sqrt(n_embd);
//   - RMSNorm weights are used as stored: llama.cpp's converter already folded Gemma's
//     "(1 + w)" into the GGUF, so the file holds 1 + w;
//   - four norms per block: attn_norm before attention, post_attention_norm on its output
//     before the residual add, ffn_norm before the FFN, post_ffw_norm on its output;
//   - QK-norm: RMSNorm of every q and k head (over head_dim) before RoPE (NEOX pairs);
//   - q is scaled by 1/sqrt(query_pre_attn_scalar) after RoPE (1/sqrt(head_dim), except
//     the 62-layer 27B model: 1/sqrt(n_embd / n_head)), the attention itself unscaled;
//   - GELU(tanh)-gated FFN, with llama.cpp's F16 GELU table (ops::geglu_tanh_f16);
//   - interleaved local and global layers: with attention.sliding_window = W > 0, layer l
//     is local when l % P < P - 1 (P = attention.sliding_window_pattern, default 6, or an
//     array of per-layer flags); a local layer's token at position p attends to positions
//     (p - W, p] and uses RoPE base rope.freq_base_swa (default 10000) without scaling; a
//     global layer attends to [0, p] with rope.freq_base and the file's linear scaling;
//   - optional final logit soft-capping (final_logit_softcapping: c * tanh(logit / c));
//   - tied output (output.weight absent: the Q8_0 embedding matrix is the projection).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/arch.h"
#include "engine/linear.h"
#include "ops/ops.h"
#include "decoder.h"

namespace ts::models {

class Gemma3 final : public engine::Architecture {
 public:
  Status load(const gguf::File& f, const std::string& arch) override;
  const engine::ModelConfig& config() const override { return cfg_; }
  ops::KvShape kv_shape() const override { return decoder::kv_shape(cfg_); }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  std::unique_ptr<engine::Workspace> make_workspace(int64_t max_tokens, int n_threads) const override;
  void prepare(ThreadPool& pool, const engine::ModelOptions& opts) override;
  bool forward(const engine::ForwardBatch& batch, ops::KvCache& kv, engine::Workspace& ws,
               ThreadPool& pool) const override;

  // For tests and reports.
  int64_t sliding_window() const { return n_swa_; }  // 0: every layer global
  bool is_local(int layer) const { return layers_[size_t(layer)].local; }
  float attn_scale() const { return attn_scale_; }

 private:
  struct Layer {
    bool local = false;                       // sliding-window layer
    const float* attn_norm = nullptr;         // [n_embd]
    engine::Matrix wq, wk, wv, wo;            // [n_embd -> n_head*hd], [-> n_kv*hd] x2, [n_head*hd -> n_embd]
    const float* q_norm = nullptr;            // [hd]
    const float* k_norm = nullptr;            // [hd]
    const float* attn_post_norm = nullptr;    // [n_embd]
    const float* ffn_norm = nullptr;          // [n_embd]
    engine::Matrix gate, up, down;            // [n_embd -> n_ff] x2, [n_ff -> n_embd]
    const float* ffn_post_norm = nullptr;     // [n_embd]
  };

  Status load_hparams(const gguf::File& f, const std::string& arch);
  void norm_add_norm(ThreadPool& pool, engine::Workspace& ws, int64_t n, const float* post_w,
                     const float* next_w) const;

  engine::ModelConfig cfg_;
  float rms_eps_ = 1e-6f;
  float embd_scale_ = 1.0f;                   // sqrt(n_embd)
  float attn_scale_ = 1.0f;                   // applied to q after RoPE
  float softcap_ = 0.0f;                      // final logit soft-capping (0: off)
  int64_t n_swa_ = 0;                         // sliding window in positions (0: none)
  ops::AttnNumerics attn_numerics_ = ops::AttnNumerics::kFlashF16;
  ops::RopeConfig rope_global_, rope_local_;
  decoder::Embeddings embd_;
  std::vector<Layer> layers_;
  uint64_t weight_bytes_ = 0;
};

}  // namespace ts::models
