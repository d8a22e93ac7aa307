// GGUF metadata keys and tensor names of the architectures we run, in one place (the
// names llama.cpp's converters write). Keys containing "%s" take the architecture name
// ("llama.attention.head_count"); tensor names containing "%d" take the layer index.
#pragma once

#include <cstdio>
#include <string>

namespace ts::engine::names {

// --- metadata keys -------------------------------------------------------------------
inline constexpr const char* kArchitecture = "general.architecture";
inline constexpr const char* kModelName = "general.name";
inline constexpr const char* kTokenizerTokens = "tokenizer.ggml.tokens";

inline constexpr const char* kContextLength = "%s.context_length";
inline constexpr const char* kEmbeddingLength = "%s.embedding_length";
inline constexpr const char* kFeedForwardLength = "%s.feed_forward_length";
inline constexpr const char* kBlockCount = "%s.block_count";
inline constexpr const char* kVocabSize = "%s.vocab_size";
inline constexpr const char* kHeadCount = "%s.attention.head_count";
inline constexpr const char* kHeadCountKv = "%s.attention.head_count_kv";
inline constexpr const char* kKeyLength = "%s.attention.key_length";
inline constexpr const char* kValueLength = "%s.attention.value_length";
inline constexpr const char* kRmsEps = "%s.attention.layer_norm_rms_epsilon";
inline constexpr const char* kSlidingWindow = "%s.attention.sliding_window";
inline constexpr const char* kRopeDimensionCount = "%s.rope.dimension_count";
inline constexpr const char* kRopeFreqBase = "%s.rope.freq_base";
inline constexpr const char* kRopeScalingType = "%s.rope.scaling.type";
inline constexpr const char* kRopeScalingFactor = "%s.rope.scaling.factor";
inline constexpr const char* kRopeScaleLinear = "%s.rope.scale_linear";  // older files

// --- tensors ---------------------------------------------------------------------------
inline constexpr const char* kTokenEmbd = "token_embd.weight";
inline constexpr const char* kOutputNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";
inline constexpr const char* kRopeFreqs = "rope_freqs.weight";  // llama3-style factors

inline constexpr const char* kAttnNorm = "blk.%d.attn_norm.weight";
inline constexpr const char* kAttnQ = "blk.%d.attn_q.weight";
inline constexpr const char* kAttnK = "blk.%d.attn_k.weight";
inline constexpr const char* kAttnV = "blk.%d.attn_v.weight";
inline constexpr const char* kAttnOut = "blk.%d.attn_output.weight";
inline constexpr const char* kAttnQBias = "blk.%d.attn_q.bias";
inline constexpr const char* kAttnKBias = "blk.%d.attn_k.bias";
inline constexpr const char* kAttnVBias = "blk.%d.attn_v.bias";
inline constexpr const char* kAttnOutBias = "blk.%d.attn_output.bias";
inline constexpr const char* kAttnQNorm = "blk.%d.attn_q_norm.weight";
inline constexpr const char* kAttnKNorm = "blk.%d.attn_k_norm.weight";
inline constexpr const char* kAttnPostNorm = "blk.%d.post_attention_norm.weight";
inline constexpr const char* kFfnNorm = "blk.%d.ffn_norm.weight";
inline constexpr const char* kFfnGate = "blk.%d.ffn_gate.weight";
inline constexpr const char* kFfnUp = "blk.%d.ffn_up.weight";
inline constexpr const char* kFfnDown = "blk.%d.ffn_down.weight";
inline constexpr const char* kFfnPostNorm = "blk.%d.post_ffw_norm.weight";

// "llama.attention.head_count" from kHeadCount and "llama".
inline std::string key(const char* fmt, const std::string& arch) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, arch.c_str());
  return buf;
}

// "blk.3.attn_q.weight" from kAttnQ and 3.
inline std::string tensor(const char* fmt, int layer) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, layer);
  return buf;
}

}  // namespace ts::engine::names
