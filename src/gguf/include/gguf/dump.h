// Human-readable and JSON descriptions of a parsed GGUF file: the body of
// `tierserve gguf-info`, kept in the layer so it is tested without the binary.
#pragma once

#include <cstddef>
#include <string>

#include "gguf/gguf.h"

namespace ts::gguf {

struct DumpOptions {
  bool tensors = true;          // include the tensor table
  size_t max_array_items = 8;   // array elements shown before "..."
  size_t max_string_bytes = 120;  // longer string values are cut (text format only)
};

// Version, alignment, data offset, every key (arrays summarised: element type, length,
// first items), a tensor table (name, type, shape, offset, bytes) and totals. Untrusted
// strings are escaped, so the output is safe for a terminal.
std::string describe_text(const File& f, const DumpOptions& opt = {});

// The same as one JSON object (keys: version, alignment, data_offset, file_size,
// metadata[], tensors[], totals). Invalid UTF-8 in values becomes U+FFFD; NaN and
// infinities become null.
std::string describe_json(const File& f, const DumpOptions& opt = {});

}  // namespace ts::gguf
