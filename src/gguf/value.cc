// Value accessors and the value-type table. A Value only ever holds what the parser (or
// nothing) put in it, so type mismatches in element accessors are caller bugs: TS_CHECK.
#include <cstdint>
#include <limits>

#include "core/check.h"
#include "gguf/gguf.h"
#include "le.h"

namespace ts::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "uint8";
    case ValueType::kInt8: return "int8";
    case ValueType::kUint16: return "uint16";
    case ValueType::kInt16: return "int16";
    case ValueType::kUint32: return "uint32";
    case ValueType::kInt32: return "int32";
    case ValueType::kFloat32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "uint64";
    case ValueType::kInt64: return "int64";
    case ValueType::kFloat64: return "float64";
  }
  return "unknown";
}

uint32_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool: return 1;
    case ValueType::kUint16:
    case ValueType::kInt16: return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32: return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64: return 8;
    case ValueType::kString:
    case ValueType::kArray: return 0;
  }
  return 0;
}

namespace {

// Decodes element `i` of a fixed-size array as an integer (uint64 reinterpreted).
int64_t load_int(ValueType t, const uint8_t* p) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kBool: return p[0];
    case ValueType::kInt8: return int8_t(p[0]);
    case ValueType::kUint16: return le::load_u16(p);
    case ValueType::kInt16: return int16_t(le::load_u16(p));
    case ValueType::kUint32: return le::load_u32(p);
    case ValueType::kInt32: return int32_t(le::load_u32(p));
    case ValueType::kUint64:
    case ValueType::kInt64: return int64_t(le::load_u64(p));
    default: TS_CHECK_MSG(false, "not an integer type");
  }
  return 0;
}

}  // namespace

std::optional<int64_t> Value::as_int() const {
  if (type_ == ValueType::kUint64 && scalar_.u > uint64_t(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  if (is_integer_type(type_) || type_ == ValueType::kBool) return scalar_.i;
  return std::nullopt;
}

std::optional<uint64_t> Value::as_uint() const {
  if (type_ == ValueType::kUint64 || type_ == ValueType::kBool) return scalar_.u;
  if (is_integer_type(type_) && scalar_.i >= 0) return uint64_t(scalar_.i);
  return std::nullopt;
}

std::optional<double> Value::as_float() const {
  if (is_float_type(type_)) return scalar_.f;
  if (type_ == ValueType::kUint64) return double(scalar_.u);
  if (is_integer_type(type_)) return double(scalar_.i);
  return std::nullopt;
}

std::optional<std::string_view> Value::as_string() const {
  if (type_ == ValueType::kString) return str_;
  return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
  if (type_ == ValueType::kBool) return scalar_.i != 0;
  return std::nullopt;
}

std::string_view Value::string_at(uint64_t i) const {
  TS_CHECK(is_array() && elem_type_ == ValueType::kString && i < count_);
  return strings_[i];
}

int64_t Value::int_at(uint64_t i) const {
  TS_CHECK(is_array() && (is_integer_type(elem_type_) || elem_type_ == ValueType::kBool) && i < count_);
  return load_int(elem_type_, data_ + i * value_type_size(elem_type_));
}

double Value::float_at(uint64_t i) const {
  TS_CHECK(is_array() && i < count_);
  const uint8_t* p = data_ + i * value_type_size(elem_type_);
  if (elem_type_ == ValueType::kFloat32) return le::load_f32(p);
  if (elem_type_ == ValueType::kFloat64) return le::load_f64(p);
  TS_CHECK_MSG(is_integer_type(elem_type_), "float_at on a non-numeric array");
  if (elem_type_ == ValueType::kUint64) return double(le::load_u64(p));
  return double(load_int(elem_type_, p));
}

const Value& Value::array_at(uint64_t i) const {
  TS_CHECK(is_array() && elem_type_ == ValueType::kArray && i < count_);
  return nested_[i];
}

std::span<const uint8_t> Value::array_bytes() const {
  if (!is_array() || value_type_size(elem_type_) == 0) return {};
  return {data_, count_ * value_type_size(elem_type_)};
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t d = 0; d < n_dims && d < kMaxDims; ++d) {
    if (d) s += ", ";
    s += std::to_string(ne[d]);
  }
  return s + "]";
}

}  // namespace ts::gguf
