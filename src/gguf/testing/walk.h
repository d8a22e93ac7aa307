// walk_file: touches everything a parsed File exposes and checks the reader's promises
// (tensor data inside the bytes, aligned, not overlapping, sized by its shape; look-ups
// find every entry). Shared by the libFuzzer target and the robustness tests; a broken
// promise is a TS_CHECK failure, which both report as a crash. Header-only so the fuzz
// build does not need the test helpers library.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "gguf/gguf.h"

namespace ts::gguf::testing {

// Returns a checksum so the compiler keeps every read.
inline uint64_t walk_value(const Value& v) {
  uint64_t sum = uint64_t(v.type());
  if (auto i = v.as_int()) sum += uint64_t(*i);
  if (auto u = v.as_uint()) sum += *u;
  if (auto f = v.as_float()) sum += uint64_t(*f == *f);
  if (auto s = v.as_string()) sum += s->size() ? uint8_t(s->front()) + uint8_t(s->back()) : 0;
  if (auto b = v.as_bool()) sum += *b;
  if (!v.is_array()) return sum;
  const ValueType t = v.elem_type();
  for (uint64_t i = 0; i < v.size(); ++i) {
    if (t == ValueType::kString) {
      std::string_view s = v.string_at(i);
      sum += s.size() ? uint8_t(s.front()) + uint8_t(s.back()) : 1;
    } else if (t == ValueType::kArray) {
      sum += walk_value(v.array_at(i));
    } else if (is_float_type(t)) {
      sum += uint64_t(v.float_at(i) == v.float_at(i));
    } else {
      sum += uint64_t(v.int_at(i));  // integers and bool
      if (is_integer_type(t)) sum += uint64_t(v.float_at(i) == v.float_at(i));
    }
  }
  if (value_type_size(t) != 0) TS_CHECK(v.array_bytes().size() == v.size() * value_type_size(t));
  return sum;
}

inline uint64_t walk_file(const File& f) {
  uint64_t sum = f.version() + f.alignment() + f.data_offset();
  TS_CHECK(f.version() == 2 || f.version() == 3);
  TS_CHECK(f.alignment() != 0 && (f.alignment() & (f.alignment() - 1)) == 0);
  TS_CHECK(f.data_offset() % f.alignment() == 0);
  for (const auto& [key, v] : f.metadata()) {
    TS_CHECK(f.find(key) == &v);  // keys are unique
    sum += walk_value(v);
  }
  const uint8_t* begin = f.bytes().data();
  const uint8_t* end = begin + f.bytes().size();
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : f.tensors()) {
    TS_CHECK(f.find_tensor(t.name) == &t);  // names are unique
    TS_CHECK(t.n_dims >= 1 && t.n_dims <= kMaxDims);
    auto layout = dtype_layout(uint32_t(t.type));
    TS_CHECK(layout.has_value());
    for (uint32_t d = 0; d < kMaxDims; ++d) TS_CHECK(t.ne[d] >= 1);
    TS_CHECK(t.ne[0] % layout->block_size == 0);
    TS_CHECK(t.n_bytes == uint64_t(t.ne[0]) / layout->block_size * layout->type_size * uint64_t(t.n_rows()));
    TS_CHECK(t.data >= begin + f.data_offset() && t.n_bytes <= uint64_t(end - t.data));
    TS_CHECK(uint64_t(t.data - begin) % f.alignment() == 0);
    TS_CHECK(t.offset % f.alignment() == 0);
    sum += t.data[0] + t.data[t.n_bytes - 1] + uint64_t(t.n_elements()) + t.shape_string().size();
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    TS_CHECK(by_offset[i - 1]->offset + by_offset[i - 1]->n_bytes <= by_offset[i]->offset);
  return sum;
}

}  // namespace ts::gguf::testing
