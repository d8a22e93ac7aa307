// libFuzzer target for the GGUF reader: parse arbitrary bytes, then walk everything the
// File exposes (testing/walk.h checks the reader's promises) and render gguf-info output.
// A failure is a sanitizer report, a TS_CHECK abort, a timeout, or a huge allocation
// (scripts/fuzz.sh sets -malloc_limit_mb).
#include <cstddef>
#include <cstdint>
#include <string>

#include "gguf/dump.h"
#include "gguf/gguf.h"
#include "testing/walk.h"

namespace {
volatile uint64_t g_sink;  // keeps the walk from being optimised away
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = ts::gguf::File::parse({data, size});
  if (!r.is_ok()) {
    // Errors are typed and name the byte offset; anything else is a reader bug.
    const ts::Status& s = r.status();
    if (s.code() != ts::StatusCode::kDataLoss && s.code() != ts::StatusCode::kUnimplemented) __builtin_trap();
    if (s.message().find(" at byte ") == std::string::npos) __builtin_trap();
    return 0;
  }
  const ts::gguf::File& f = **r;
  uint64_t sum = ts::gguf::testing::walk_file(f);
  ts::gguf::DumpOptions opt;
  sum += ts::gguf::describe_text(f, opt).size();
  sum += ts::gguf::describe_json(f, opt).size();
  g_sink = g_sink + sum;
  return 0;
}
