#include "model_path.h"

#include <cstdlib>

namespace ts::tools {

namespace {

std::string model_dir() {
  std::string dir;
  if (const char* e = std::getenv("TIERSERVE_MODEL_DIR"); e && *e) {
    dir = e;
  } else {
    const char* home = std::getenv("HOME");
    dir = std::string(home ? home : ".") + "/.cache/tierserve/models";
  }
  return dir;
}

}  // namespace

std::string default_model_path() {
  if (const char* e = std::getenv("TIERSERVE_MODEL"); e && *e) return e;
  return model_dir() + "/gemma-3-270m-q4_k_m.gguf";
}

std::string default_chat_model_path() {
  if (const char* e = std::getenv("TIERSERVE_CHAT_MODEL"); e && *e) return e;
  return model_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace ts::tools
