// A validating GGUF (v2, v3) reader over mmap, and a deterministic GGUF v3 writer. The
// format, and every rule the reader enforces, is specified in docs/gguf_format.md.
//
// Every count, length, dimension, offset and size read from the file is checked with
// overflow-safe arithmetic against the file size and fixed caps before it is used; a
// malformed file yields a kDataLoss Status (kUnimplemented for well-formed files we do
// not support: GGUF v1, big-endian files, unknown versions, unknown tensor types) whose
// message names the field and the byte offset where it was read, e.g.
//
//   DataLoss: tensor 'blk.0.attn_q.weight' (#5): data [1234, 99999) runs past end of file
//   (size 5000) at byte 812
//
// Parsing never reserves memory for a count before checking that the remaining bytes can
// hold that many entries, so memory stays a small multiple of the file size. Strings and
// arrays are views into the bytes (the 262,144-entry vocabulary of a real model is not
// copied) and tensor data is never touched, so parsing a large model takes milliseconds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/mmap_file.h"
#include "core/status.h"

namespace ts::gguf {

// Metadata value types, numbered as in the file.
enum class ValueType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
// "uint32", "string", ...; "unknown" for ids outside the enum.
const char* value_type_name(ValueType t);
// Bytes of one element of a fixed-size type (numbers, bool); 0 for string and array.
uint32_t value_type_size(ValueType t);
inline bool is_integer_type(ValueType t) {
  return t == ValueType::kUint8 || t == ValueType::kInt8 || t == ValueType::kUint16 ||
         t == ValueType::kInt16 || t == ValueType::kUint32 || t == ValueType::kInt32 ||
         t == ValueType::kUint64 || t == ValueType::kInt64;
}
inline bool is_float_type(ValueType t) { return t == ValueType::kFloat32 || t == ValueType::kFloat64; }

// Caps on what a well-formed file may declare (far above any real model). Exceeding one
// is kDataLoss: such a file is garbage or hostile, not a bigger model.
inline constexpr uint64_t kMaxTensors = 1u << 20;
inline constexpr uint64_t kMaxKv = 1u << 20;
inline constexpr uint64_t kMaxStringBytes = 1u << 30;   // one string value
inline constexpr uint64_t kMaxNameBytes = 65535;         // a key or a tensor name
inline constexpr uint64_t kMaxArrayDepth = 4;            // array of array of ... (4 levels)
inline constexpr uint64_t kMaxNestedArrays = 1u << 20;   // nested array values in a file
inline constexpr uint32_t kMaxDims = 4;
inline constexpr uint64_t kDefaultAlignment = 32;
inline constexpr uint64_t kMaxAlignment = 1u << 20;      // general.alignment cap (1 MiB)
inline constexpr std::string_view kAlignmentKey = "general.alignment";

// One metadata value. Scalars are stored decoded; strings and arrays point into the file
// bytes, so a Value must not outlive its File.
class Value {
 public:
  ValueType type() const { return type_; }

  // Integer types and bool. nullopt for other types (no silent float truncation), and for
  // a uint64 above INT64_MAX (use as_uint).
  std::optional<int64_t> as_int() const;
  // Unsigned and non-negative signed integer types, and bool.
  std::optional<uint64_t> as_uint() const;
  // Float types, and integers converted.
  std::optional<double> as_float() const;
  std::optional<std::string_view> as_string() const;
  std::optional<bool> as_bool() const;

  bool is_array() const { return type_ == ValueType::kArray; }
  ValueType elem_type() const { return elem_type_; }  // arrays only
  uint64_t size() const { return count_; }            // arrays only (0 otherwise)
  // Element accessors; `i` must be < size() and the element type must fit (TS_CHECKed: a
  // caller checks elem_type() first, the file cannot trigger these).
  std::string_view string_at(uint64_t i) const;  // string arrays
  int64_t int_at(uint64_t i) const;              // integer and bool arrays; uint64 wraps
  double float_at(uint64_t i) const;             // float and integer arrays
  const Value& array_at(uint64_t i) const;       // nested arrays (array of arrays)
  // The raw little-endian payload of a numeric or bool array (size() * element size
  // bytes, unaligned), for bulk conversion.
  std::span<const uint8_t> array_bytes() const;

 private:
  friend class Parser;
  ValueType type_ = ValueType::kUint8;
  ValueType elem_type_ = ValueType::kUint8;
  union {
    int64_t i;
    uint64_t u;
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
  int64_t ne[kMaxDims] = {1, 1, 1, 1};  // ne[0] is contiguous (a row), as in ggml; unused = 1
  uint64_t offset = 0;                   // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;         // inside the file bytes

  // Both fit in int64: the reader checks the product.
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;      // "[4096, 32000]" (n_dims entries)
};

class File {
 public:
  // Maps and parses `path`. The File owns the mapping. Errors: those of MappedFile::open,
  // then those of parse() with the path prepended.
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Parses bytes the caller keeps alive for the File's lifetime (fuzzing, tests).
  static Result<std::unique_ptr<File>> parse(std::span<const uint8_t> bytes);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Start of the data section (aligned end of the tensor infos). With no tensors it may
  // lie past the end of the file: the trailing padding is optional then.
  uint64_t data_offset() const { return data_offset_; }
  std::span<const uint8_t> bytes() const { return bytes_; }

  // In file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;  // O(log n)
  // Typed look-ups: kNotFound when absent, kDataLoss when of the wrong type.
  Result<std::string_view> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;   // integer types and bool
  Result<double> get_float(std::string_view key) const;  // float and integer types
  Result<bool> get_bool(std::string_view key) const;
  const Value* get_array(std::string_view key) const;  // nullptr when absent or not an array

  // In file order (not offset order).
  // Drops the file's pages from the resident set (see MappedFile::advise_dontneed); a
  // no-op for parsed byte spans the caller owns.
  void release_pages() const {
    if (mapping_) mapping_->advise_dontneed();
  }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // O(log n)
  // Sum of n_bytes over all tensors.
  uint64_t tensor_bytes() const;

 private:
  friend class Parser;
  std::unique_ptr<MappedFile> mapping_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
  // Sorted by name for look-ups; the views point into bytes_ (stable, unlike the
  // std::strings above, whose short-string buffers move with the vector).
  std::vector<std::pair<std::string_view, uint32_t>> kv_index_;
  std::vector<std::pair<std::string_view, uint32_t>> tensor_index_;
};

// Writes GGUF v3 files (model maker, tests). Metadata is written in the order added;
// tensors in the order added, each aligned to `alignment`. Same calls, same bytes.
//
// Inputs come from our own code, so misuse (data size not matching the shape, duplicate
// names, a bad alignment) is reported by validate()/write() as kInvalidArgument, and is a
// TS_CHECK failure in to_bytes().
class Writer {
 public:
  explicit Writer(uint64_t alignment = kDefaultAlignment) : alignment_(alignment) {}

  void add_u8(std::string key, uint8_t v);
  void add_i8(std::string key, int8_t v);
  void add_u16(std::string key, uint16_t v);
  void add_i16(std::string key, int16_t v);
  void add_u32(std::string key, uint32_t v);
  void add_i32(std::string key, int32_t v);
  void add_u64(std::string key, uint64_t v);
  void add_i64(std::string key, int64_t v);
  void add_f32(std::string key, float v);
  void add_f64(std::string key, double v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_string_array(std::string key, std::vector<std::string> v);
  void add_f32_array(std::string key, std::vector<float> v);
  void add_i32_array(std::string key, std::vector<int32_t> v);
  // Any fixed-size element type (numbers, bool): `le_bytes` holds `count` elements,
  // little-endian (bools as 0/1 bytes).
  void add_array(std::string key, ValueType elem_type, uint64_t count, std::vector<uint8_t> le_bytes);

  // `data` must hold exactly the bytes of `type` for shape `ne` (ne[0] contiguous,
  // 1..4 dims).
  void add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data);
  // As add_tensor, without copying: `data` must stay alive until write()/to_bytes().
  void add_tensor_view(std::string name, DType type, std::vector<int64_t> ne,
                       std::span<const uint8_t> data);

  // kInvalidArgument naming the first problem with what was added.
  Status validate() const;
  // Streams the file to `path` (through `path`.tmp, renamed at the end, so a reader never
  // sees half a file). Tensor data is not copied again.
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
    std::vector<uint8_t> owned;     // add_tensor
    std::span<const uint8_t> view;  // add_tensor_view: the caller's bytes
    bool borrowed = false;
    // Computed on use, so copying or moving the Writer cannot leave a dangling view.
    std::span<const uint8_t> bytes() const { return borrowed ? view : std::span<const uint8_t>(owned); }
  };
  void add_scalar(std::string key, ValueType type, const void* le, size_t n);
  // Emits the file through `sink(bytes, n)`, which returns false on an I/O error.
  template <typename Sink>
  bool emit(Sink&& sink) const;

  uint64_t alignment_;
  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace ts::gguf
