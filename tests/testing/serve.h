// What the `tierserve serve` black-box tests share: the models, a work directory per test
// binary (define TS_SERVE_TEST_DIR before including), JSON bodies.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <tuple>

#include "server.h"

namespace ts {
namespace {

using json = nlohmann::json;
using namespace ts::testing_server;

const std::string kStories = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kWork = std::string(TS_BINARY_DIR) + "/" + TS_SERVE_TEST_DIR;
const std::string kSlowModel = kWork + "/llama15m_q8_0.gguf";

inline std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  return out;
}

inline void make_dirs_and_models() {
  static bool done = false;
  if (done) return;
  ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0);
  if (!std::ifstream(kSlowModel)) {
    const std::string cmd = std::string(TS_TIERSERVE_BIN) + " make-model --arch llama --shape 15m --type q8_0 -o '" +
                            kSlowModel + "' > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  done = true;
}

inline std::string hash_key(const std::string& key) { return testing_server::hash_key(TS_TIERSERVE_BIN, key, kWork); }

inline json body_json(const HttpResult& r) {
  try {
    return json::parse(r.body);
  } catch (...) {
    ADD_FAILURE() << "not JSON: " << r.body;
    return json();
  }
}

// ---------------------------------------------------------------------------------------
// Server A: stories260K, no keys, small header/body limits.

}  // namespace
}  // namespace ts
