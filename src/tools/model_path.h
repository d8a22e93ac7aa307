// Where the default model lives: shared by `tierserve run` and `tierserve serve`.
#pragma once

#include <string>

namespace ts::tools {

// $TIERSERVE_MODEL, else $TIERSERVE_MODEL_DIR (or ~/.cache/tierserve/models, where
// scripts/setup-model.sh installs it) + /gemma-3-270m-q4_k_m.gguf.
std::string default_model_path();

}  // namespace ts::tools
