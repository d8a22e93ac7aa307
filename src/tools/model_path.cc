#include "model_path.h"

#include <cstdlib>

namespace ts::tools {

std::string default_model_path() {
  if (const char* e = std::getenv("TIERSERVE_MODEL"); e && *e) return e;
  std::string dir;
  if (const char* e = std::getenv("TIERSERVE_MODEL_DIR"); e && *e) {
    dir = e;
  } else {
    const char* home = std::getenv("HOME");
    dir = std::string(home ? home : ".") + "/.cache/tierserve/models";
  }
  return dir + "/gemma-3-270m-q4_k_m.gguf";
}

}  // namespace ts::tools
