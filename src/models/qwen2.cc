// qwen2: the llama block with QKV biases and NEOX-style RoPE (pairs i, i + n_rot/2).
#include "llama_family.h"
#include "models/register.h"

namespace ts::models {
namespace {

std::unique_ptr<engine::Architecture> make_qwen2() {
  return std::make_unique<LlamaFamily>(LlamaVariant{.neox_rope = true, .require_qkv_bias = true, .qk_norm = false});
}

}  // namespace

void register_qwen2() { engine::register_architecture("qwen2", make_qwen2); }

}  // namespace ts::models
