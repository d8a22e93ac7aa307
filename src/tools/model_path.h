// Where the default model lives: shared by `tierserve run` and `tierserve serve`.
#pragma once

#include <string>

namespace ts::tools {

// $TIERSERVE_MODEL, else $TIERSERVE_MODEL_DIR (or ~/.cache/tierserve/models, where
// scripts/setup-model.sh installs it) + /gemma-3-270m-q4_k_m.gguf.
std::string default_model_path();
// The default chat model (SmolLM2 135M Instruct, installed beside it by setup-model.sh):
// $TIERSERVE_CHAT_MODEL, else the model directory + /SmolLM2-135M-Instruct.Q4_1.gguf.
// `tierserve run --chat` without -m uses it (Gemma 3 270M is a base model: it cannot chat).
std::string default_chat_model_path();

}  // namespace ts::tools
