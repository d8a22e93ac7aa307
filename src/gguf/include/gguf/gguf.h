// A validating GGUF (v2, v3) reader over mmap. The format is specified in
// docs/gguf_format.md.
//
// Every count, length, dimension, offset and size read from the file is checked with
// overflow-safe arithmetic against the file size and fixed caps before it is used; a
// malformed file yields a kDataLoss (or kUnimplemented for unknown-but-well-formed types)
// Status whose message names the field and its byte offset. Parsing never allocates more
// than a small multiple of the file size. Strings and arrays are views into the mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"
#include "core/status.h"

namespace ts::gguf {

enum class ValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* value_type_name(ValueType t);

// Caps on what a well-formed file may declare (far above any real model).
inline constexpr uint64_t kMaxTensors = 1u << 20;
inline constexpr uint64_t kMaxKv = 1u << 20;
inline constexpr uint64_t kMaxStringBytes = 1u << 30;
inline constexpr uint64_t kMaxArrayDepth = 4;
inline constexpr uint32_t kMaxDims = 4;

// One metadata value. Scalars are stored decoded; strings and arrays point into the file.
class Value {
 public:
  ValueType type() const { return type_; }

  // Integer types and bool. nullopt for other types (no silent float truncation).
  std::optional<int64_t> as_int() const;
  // Float types, and integers converted.
  std::optional<double> as_float() const;
  std::optional<std::string_view> as_string() const;
  std::optional<bool> as_bool() const;

  bool is_array() const { return type_ == ValueType::kArray; }
  ValueType elem_type() const { return elem_type_; }  // arrays only
  uint64_t size() const { return count_; }            // arrays only
  // Element accessors; `i` must be < size() and the element type must match (checked).
  std::string_view string_at(uint64_t i) const;
  int64_t int_at(uint64_t i) const;
  double float_at(uint64_t i) const;
  // Nested arrays (array of arrays): element i as a Value.
  const Value& array_at(uint64_t i) const;

 private:
  friend class Parser;
  ValueType type_ = ValueType::kUint8;
  ValueType elem_type_ = ValueType::kUint8;
  union {
    int64_t i;
    double f;
  } scalar_{0};
  std::string_view str_;                     // kString
  const uint8_t* data_ = nullptr;            // numeric array payload (unaligned)
  uint64_t count_ = 0;
  std::vector<std::string_view> strings_;    // string arrays (views into the file)
  std::vector<Value> nested_;                // array arrays
};

struct TensorInfo {
  std::string name;
  DType type = DType::F32;
  uint32_t n_dims = 0;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is contiguous (a row), as in ggml
  uint64_t offset = 0;                   // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;         // inside the mapping

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;      // "[4096, 32000]"
};

class File {
 public:
  // Maps and parses `path`. The File owns the mapping.
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Parses bytes the caller keeps alive (fuzzing, tests).
  static Result<std::unique_ptr<File>> parse(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  std::span<const uint8_t> bytes() const { return bytes_; }

  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  // Typed look-ups: kNotFound when absent, kDataLoss when of the wrong type.
  Result<std::string_view> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;
  Result<bool> get_bool(std::string_view key) const;
  const Value* get_array(std::string_view key) const;  // nullptr when absent or not an array

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  friend class Parser;
  std::unique_ptr<MappedFile> mapping_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
};

// Writes GGUF v3 files (model maker, tests). Values are buffered; tensors are copied into
// the file aligned to `alignment`.
class Writer {
 public:
  explicit Writer(uint64_t alignment = 32) : alignment_(alignment) {}

  void add_u32(std::string key, uint32_t v);
  void add_i32(std::string key, int32_t v);
  void add_u64(std::string key, uint64_t v);
  void add_f32(std::string key, float v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_string_array(std::string key, std::vector<std::string> v);
  void add_f32_array(std::string key, std::vector<float> v);
  void add_i32_array(std::string key, std::vector<int32_t> v);
  // `data` must hold exactly the bytes of `type` for shape `ne` (ne[0] contiguous).
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data);

  Status write(const std::string& path) const;
  std::vector<uint8_t> to_bytes() const;

 private:
  struct Kv {
    std::string key;
    ValueType type;
    ValueType elem_type;
    std::vector<uint8_t> payload;  // encoded value (after the type field)
  };
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  uint64_t alignment_;
  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace ts::gguf
