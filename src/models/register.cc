#include "models/register.h"

namespace ts::models {

void register_all() {
  register_llama();
  register_qwen2();
  register_qwen3();
  register_gemma3();
}

}  // namespace ts::models
