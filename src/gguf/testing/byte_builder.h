// ByteBuilder: writes GGUF pieces field by field, including ones the Writer refuses to
// produce (bad counts, types, lengths), for the crafted bad files and parser tests.
// pos() marks where a field starts, so tests can assert the byte offset in an error.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "le.h"

namespace ts::gguf::testing {

class ByteBuilder {
 public:
  uint64_t pos() const { return bytes_.size(); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }

  ByteBuilder& u8(uint8_t v) { return le::put_u8(bytes_, v), *this; }
  ByteBuilder& u16(uint16_t v) { return le::put_u16(bytes_, v), *this; }
  ByteBuilder& u32(uint32_t v) { return le::put_u32(bytes_, v), *this; }
  ByteBuilder& u64(uint64_t v) { return le::put_u64(bytes_, v), *this; }
  ByteBuilder& f32(float v) { return le::put_f32(bytes_, v), *this; }
  ByteBuilder& f64(double v) { return le::put_f64(bytes_, v), *this; }
  ByteBuilder& str(std::string_view s) { return le::put_str(bytes_, s), *this; }
  ByteBuilder& raw(std::string_view s) {
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  ByteBuilder& zeros(uint64_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  ByteBuilder& pad_to(uint64_t align) { return zeros((align - pos() % align) % align); }
  ByteBuilder& truncate(uint64_t n) {
    if (n < bytes_.size()) bytes_.resize(n);
    return *this;
  }

  // "GGUF", version, tensor count, kv count.
  ByteBuilder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  // A key and its type; the value follows.
  ByteBuilder& key(std::string_view k, ValueType t) { return str(k).u32(uint32_t(t)); }
  ByteBuilder& kv_u32(std::string_view k, uint32_t v) { return key(k, ValueType::kUint32).u32(v); }
  ByteBuilder& kv_str(std::string_view k, std::string_view v) { return key(k, ValueType::kString).str(v); }
  // A tensor info: name, n_dims, dims, type id, offset.
  ByteBuilder& tensor(std::string_view name, std::initializer_list<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(uint32_t(ne.size()));
    for (uint64_t n : ne) u64(n);
    return u32(type).u64(offset);
  }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace ts::gguf::testing
