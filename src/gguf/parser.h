// The GGUF parser: one pass over untrusted bytes that fills a File or returns a Status
// naming the bad field and its byte offset. Private to the gguf layer; File::parse is the
// entry point. See docs/gguf_format.md for the rules checked here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace ts::gguf {

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, File* out) : b_(bytes), f_(out) {}
  Status parse();

 private:
  // --- sections ---
  Status parse_header(uint64_t* n_tensors, uint64_t* n_kv);
  Status parse_kvs(uint64_t n_kv);
  Status check_alignment_kv(const Value& v, uint64_t value_at);
  Status parse_tensor_infos(uint64_t n_tensors);
  Status parse_one_tensor_info(uint64_t index, TensorInfo* t);
  Status check_tensor_data();

  // --- values ---
  Status read_value(ValueType type, uint64_t type_at, Value* v);
  Status read_array(Value* v, uint32_t depth);
  Status read_type(const char* field, ValueType* out);

  // --- cursor: each read checks the remaining bytes first ---
  uint64_t left() const { return b_.size() - pos_; }
  Status need(uint64_t n, const char* field);
  Status read_u32(const char* field, uint32_t* out);
  Status read_u64(const char* field, uint64_t* out);
  // A GGUF string (u64 length + bytes) of at most `cap` bytes, as a view into b_.
  Status read_string(const char* field, uint64_t cap, std::string_view* out);

  // --- messages ---
  // "<context>: <problem> at byte <at>", where the context names the section, the entry
  // and (inside arrays) the element being read.
  Status fail(StatusCode code, uint64_t at, const std::string& problem) const;
  Status fail(uint64_t at, const std::string& problem) const { return fail(StatusCode::kDataLoss, at, problem); }
  std::string context() const;

  enum class Section { kHeader, kKv, kTensorInfo, kTensorData };

  std::span<const uint8_t> b_;
  File* f_;
  uint64_t pos_ = 0;

  Section section_ = Section::kHeader;
  uint64_t entry_ = 0;          // kv or tensor index
  std::string_view entry_name_; // key or tensor name, once read
  uint64_t elem_path_[kMaxArrayDepth] = {};
  uint32_t elem_depth_ = 0;     // number of valid entries in elem_path_
  uint64_t nested_arrays_ = 0;  // against kMaxNestedArrays

  // Where each key / tensor name / tensor offset field was read, for messages raised after
  // the entry itself (duplicates, data ranges, overlaps).
  std::vector<uint64_t> key_at_;
  std::vector<uint64_t> name_at_;
  std::vector<uint64_t> offset_at_;
};

}  // namespace ts::gguf
