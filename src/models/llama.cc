// llama (and mistral, which GGUF files also label as such): RMSNorm, GQA, RoPE over
// adjacent pairs, SwiGLU; QKV biases when a file has them; tied or separate output.
#include "llama_family.h"
#include "models/register.h"

namespace ts::models {
namespace {

std::unique_ptr<engine::Architecture> make_llama() {
  return std::make_unique<LlamaFamily>(LlamaVariant{.neox_rope = false, .require_qkv_bias = false, .qk_norm = false});
}

}  // namespace

void register_llama() {
  engine::register_architecture("llama", make_llama);
  engine::register_architecture("mistral", make_llama);
}

}  // namespace ts::models
