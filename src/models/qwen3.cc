// qwen3: the llama block with RMSNorm on every q and k head before NEOX-style RoPE
// (QK-norm), no QKV biases, head_dim from attention.key_length.
#include "llama_family.h"
#include "models/register.h"

namespace ts::models {
namespace {

std::unique_ptr<engine::Architecture> make_qwen3() {
  return std::make_unique<LlamaFamily>(LlamaVariant{.neox_rope = true, .require_qkv_bias = false, .qk_norm = true});
}

}  // namespace

void register_qwen3() { engine::register_architecture("qwen3", make_qwen3); }

}  // namespace ts::models
