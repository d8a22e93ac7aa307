// The GGUF parser. Every read goes through need(), which compares against the bytes left
// (never pos + n, which could wrap); every count is checked against the bytes left times
// the smallest encoding of one entry before anything is reserved; sizes derived from the
// file use checked_add / checked_mul.
#include "parser.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "core/safe_math.h"
#include "le.h"
#include "utf8.h"

namespace ts::gguf {
namespace {

// Smallest encodings, used to bound counts by the bytes left: a kv is a non-empty key
// (8 + 1), a type (4) and at least a one-byte value; a tensor info is a non-empty name
// (8 + 1), n_dims (4), one dimension (8), a type (4) and an offset (8).
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
// A nested array element is at least its element type (4) and count (8).
constexpr uint64_t kMinNestedArrayBytes = 4 + 8;
constexpr uint32_t kLastValueType = uint32_t(ValueType::kFloat64);

std::string num(uint64_t v) { return std::to_string(v); }

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint32_t byteswap32(uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xFF00u) | ((v << 8) & 0xFF0000u) | (v << 24);
}

}  // namespace

// ---------------------------------------------------------------- messages and cursor

std::string Parser::context() const {
  std::string c;
  switch (section_) {
    case Section::kHeader: c = "header"; break;
    case Section::kKv:
      c = "kv #" + num(entry_);
      if (!entry_name_.empty()) c += " '" + escape_for_message(entry_name_) + "'";
      break;
    case Section::kTensorInfo:
    case Section::kTensorData:
      if (entry_name_.empty()) {
        c = "tensor #" + num(entry_);
      } else {
        c = "tensor '" + escape_for_message(entry_name_) + "' (#" + num(entry_) + ")";
      }
      break;
  }
  if (elem_depth_ > 0) {
    c += ": element ";
    for (uint32_t d = 0; d < elem_depth_; ++d) c += (d ? "." : "") + num(elem_path_[d]);
  }
  return c;
}

Status Parser::fail(StatusCode code, uint64_t at, const std::string& problem) const {
  return Status(code, context() + ": " + problem + " at byte " + num(at));
}

Status Parser::need(uint64_t n, const char* field) {
  if (n <= left()) return Status::ok();
  return fail(pos_, std::string(field) + " truncated: need " + num(n) + " bytes, " + num(left()) +
                        " left (file size " + num(b_.size()) + ")");
}

Status Parser::read_u32(const char* field, uint32_t* out) {
  TS_RETURN_IF_ERROR(need(4, field));
  *out = le::load_u32(b_.data() + pos_);
  pos_ += 4;
  return Status::ok();
}

Status Parser::read_u64(const char* field, uint64_t* out) {
  TS_RETURN_IF_ERROR(need(8, field));
  *out = le::load_u64(b_.data() + pos_);
  pos_ += 8;
  return Status::ok();
}

Status Parser::read_string(const char* field, uint64_t cap, std::string_view* out) {
  const uint64_t at = pos_;
  uint64_t len = 0;
  TS_RETURN_IF_ERROR(read_u64(field, &len));
  if (len > cap) {
    pos_ = at;
    return fail(at, std::string(field) + " length " + num(len) + " exceeds the cap of " + num(cap) + " bytes");
  }
  if (len > left()) {
    pos_ = at;
    return fail(at, std::string(field) + " length " + num(len) + " runs past end of file (" + num(left()) +
                        " bytes left, file size " + num(b_.size()) + ")");
  }
  *out = std::string_view(reinterpret_cast<const char*>(b_.data() + pos_), size_t(len));
  pos_ += len;
  return Status::ok();
}

Status Parser::read_type(const char* field, ValueType* out) {
  const uint64_t at = pos_;
  uint32_t t = 0;
  TS_RETURN_IF_ERROR(read_u32(field, &t));
  // An unknown value type leaves the rest of the file unparseable: data loss, not a
  // feature we lack.
  if (t > kLastValueType) return fail(at, std::string("unknown ") + field + " " + num(t));
  *out = ValueType(t);
  return Status::ok();
}

// ---------------------------------------------------------------- top level

Status Parser::parse() {
  uint64_t n_tensors = 0, n_kv = 0;
  TS_RETURN_IF_ERROR(parse_header(&n_tensors, &n_kv));
  TS_RETURN_IF_ERROR(parse_kvs(n_kv));
  TS_RETURN_IF_ERROR(parse_tensor_infos(n_tensors));
  return check_tensor_data();
}

Status Parser::parse_header(uint64_t* n_tensors, uint64_t* n_kv) {
  section_ = Section::kHeader;
  if (b_.empty()) return fail(0, "file is empty (0 bytes)");
  TS_RETURN_IF_ERROR(need(4, "magic"));
  if (std::string_view(reinterpret_cast<const char*>(b_.data()), 4) != "GGUF") {
    return fail(0, "bad magic '" + escape_for_message({reinterpret_cast<const char*>(b_.data()), 4}) +
                       "' (want 'GGUF')");
  }
  pos_ = 4;
  uint32_t version = 0;
  TS_RETURN_IF_ERROR(read_u32("version", &version));
  if (version != 2 && version != 3) {
    const uint32_t swapped = byteswap32(version);
    if (swapped >= 1 && swapped <= 3) {
      return fail(StatusCode::kUnimplemented, 4,
                  "version field reads as big-endian " + num(swapped) + ": big-endian GGUF files are not supported");
    }
    if (version == 1) {
      return fail(StatusCode::kUnimplemented, 4, "GGUF version 1 is not supported (want 2 or 3)");
    }
    return fail(StatusCode::kUnimplemented, 4, "unsupported GGUF version " + num(version) + " (want 2 or 3)");
  }
  f_->version_ = version;

  const uint64_t count_at = pos_;
  TS_RETURN_IF_ERROR(read_u64("tensor count", n_tensors));
  const uint64_t kv_at = pos_;
  TS_RETURN_IF_ERROR(read_u64("kv count", n_kv));
  if (*n_tensors > kMaxTensors)
    return fail(count_at, "tensor count " + num(*n_tensors) + " exceeds the cap of " + num(kMaxTensors));
  if (*n_kv > kMaxKv) return fail(kv_at, "kv count " + num(*n_kv) + " exceeds the cap of " + num(kMaxKv));
  // Division, not multiplication: the counts are capped, but keep the rule obviously safe.
  if (*n_kv > left() / kMinKvBytes) {
    return fail(kv_at, "kv count " + num(*n_kv) + " needs at least " + num(*n_kv * kMinKvBytes) + " bytes, only " +
                           num(left()) + " left");
  }
  if (*n_tensors > left() / kMinTensorInfoBytes) {
    return fail(count_at, "tensor count " + num(*n_tensors) + " needs at least " +
                              num(*n_tensors * kMinTensorInfoBytes) + " bytes, only " + num(left()) + " left");
  }
  return Status::ok();
}

// ---------------------------------------------------------------- metadata

Status Parser::parse_kvs(uint64_t n_kv) {
  section_ = Section::kKv;
  f_->kv_.reserve(n_kv);  // bounded by the bytes left (parse_header)
  key_at_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    entry_ = i;
    entry_name_ = {};
    const uint64_t key_at = pos_;
    std::string_view key;
    TS_RETURN_IF_ERROR(read_string("key", kMaxNameBytes, &key));
    if (key.empty()) return fail(key_at, "key is empty");
    size_t bad = 0;
    if (!is_valid_utf8(key, &bad)) {
      return fail(key_at + 8 + bad, "key '" + escape_for_message(key) + "' is not valid UTF-8 (bad byte at +" +
                                        num(bad) + ")");
    }
    entry_name_ = key;
    const uint64_t type_at = pos_;
    ValueType type;
    TS_RETURN_IF_ERROR(read_type("value type", &type));
    Value v;
    const uint64_t value_at = pos_;
    TS_RETURN_IF_ERROR(read_value(type, type_at, &v));
    if (key == kAlignmentKey) TS_RETURN_IF_ERROR(check_alignment_kv(v, value_at));
    f_->kv_.emplace_back(std::string(key), std::move(v));
    f_->kv_index_.emplace_back(key, uint32_t(i));
    key_at_.push_back(key_at);
  }

  // Duplicates: sort a name index (kept for find()) and compare neighbours. The stable
  // sort keeps file order among equal keys, so the second occurrence is reported.
  auto& index = f_->kv_index_;
  std::stable_sort(index.begin(), index.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < index.size(); ++i) {
    if (index[i].first != index[i - 1].first) continue;
    entry_ = index[i].second;
    entry_name_ = index[i].first;
    return fail(key_at_[entry_], "duplicate key (first at kv #" + num(index[i - 1].second) + ")");
  }
  entry_name_ = {};
  return Status::ok();
}

Status Parser::check_alignment_kv(const Value& v, uint64_t value_at) {
  if (v.type() != ValueType::kUint32) {
    return fail(value_at, std::string("general.alignment has type ") + value_type_name(v.type()) + ", want uint32");
  }
  const uint64_t a = *v.as_uint();
  if (a == 0) return fail(value_at, "general.alignment is 0");
  if (!is_power_of_two(a)) return fail(value_at, "general.alignment " + num(a) + " is not a power of two");
  if (a > kMaxAlignment) {
    return fail(value_at, "general.alignment " + num(a) + " exceeds the cap of " + num(kMaxAlignment));
  }
  f_->alignment_ = a;
  return Status::ok();
}

Status Parser::read_value(ValueType type, uint64_t type_at, Value* v) {
  v->type_ = type;
  const uint64_t at = pos_;
  switch (type) {
    case ValueType::kString:
      return read_string("string", kMaxStringBytes, &v->str_);
    case ValueType::kArray:
      return read_array(v, 1);
    default:
      break;
  }
  const uint32_t size = value_type_size(type);
  TS_RETURN_IF_ERROR(need(size, value_type_name(type)));
  const uint8_t* p = b_.data() + pos_;
  switch (type) {
    case ValueType::kUint8: v->scalar_.i = p[0]; break;
    case ValueType::kInt8: v->scalar_.i = int8_t(p[0]); break;
    case ValueType::kUint16: v->scalar_.i = le::load_u16(p); break;
    case ValueType::kInt16: v->scalar_.i = int16_t(le::load_u16(p)); break;
    case ValueType::kUint32: v->scalar_.i = le::load_u32(p); break;
    case ValueType::kInt32: v->scalar_.i = int32_t(le::load_u32(p)); break;
    case ValueType::kUint64: v->scalar_.u = le::load_u64(p); break;
    case ValueType::kInt64: v->scalar_.i = int64_t(le::load_u64(p)); break;
    case ValueType::kFloat32: v->scalar_.f = le::load_f32(p); break;
    case ValueType::kFloat64: v->scalar_.f = le::load_f64(p); break;
    case ValueType::kBool:
      if (p[0] > 1) return fail(at, "bool value " + num(p[0]) + " is neither 0 nor 1");
      v->scalar_.i = p[0];
      break;
    default:
      return fail(type_at, "unknown value type " + num(uint32_t(type)));  // unreachable: read_type
  }
  pos_ += size;
  return Status::ok();
}

Status Parser::read_array(Value* v, uint32_t depth) {
  v->type_ = ValueType::kArray;
  const uint64_t type_at = pos_;
  TS_RETURN_IF_ERROR(read_type("array element type", &v->elem_type_));
  if (v->elem_type_ == ValueType::kArray && depth + 1 > kMaxArrayDepth) {
    return fail(type_at, "arrays nested deeper than " + num(kMaxArrayDepth) + " levels");
  }
  const uint64_t count_at = pos_;
  uint64_t count = 0;
  TS_RETURN_IF_ERROR(read_u64("array count", &count));
  const uint32_t fixed = value_type_size(v->elem_type_);
  const uint64_t min_elem = fixed ? fixed : v->elem_type_ == ValueType::kString ? 8 : kMinNestedArrayBytes;
  if (count > left() / min_elem) {
    return fail(count_at, "array count " + num(count) + " of " + value_type_name(v->elem_type_) +
                              " needs at least " + (count > std::numeric_limits<uint64_t>::max() / min_elem
                                                        ? std::string("2^64")
                                                        : num(count * min_elem)) +
                              " bytes, only " + num(left()) + " left");
  }
  v->count_ = count;

  if (fixed) {  // numbers and bools: a view, nothing decoded or copied
    v->data_ = b_.data() + pos_;
    if (v->elem_type_ == ValueType::kBool) {
      for (uint64_t i = 0; i < count; ++i) {
        if (v->data_[i] > 1) return fail(pos_ + i, "bool element " + num(i) + " is " + num(v->data_[i]) + ", neither 0 nor 1");
      }
    }
    pos_ += count * fixed;
    return Status::ok();
  }

  TS_CHECK(elem_depth_ < kMaxArrayDepth);
  const uint32_t slot = elem_depth_++;
  if (v->elem_type_ == ValueType::kString) {
    // The hot loop for tokenizer vocabularies (262,144 entries): views, no copies.
    v->strings_.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      elem_path_[slot] = i;
      std::string_view s;
      TS_RETURN_IF_ERROR(read_string("string", kMaxStringBytes, &s));
      v->strings_.push_back(s);
    }
  } else {
    if (count > kMaxNestedArrays - nested_arrays_) {
      return fail(count_at, "array count " + num(count) + " takes the file past " + num(kMaxNestedArrays) +
                                " nested arrays");
    }
    nested_arrays_ += count;
    v->nested_.resize(count);
    for (uint64_t i = 0; i < count; ++i) {
      elem_path_[slot] = i;
      TS_RETURN_IF_ERROR(read_array(&v->nested_[i], depth + 1));
    }
  }
  --elem_depth_;
  return Status::ok();
}

// ---------------------------------------------------------------- tensor infos

Status Parser::parse_tensor_infos(uint64_t n_tensors) {
  section_ = Section::kTensorInfo;
  entry_name_ = {};
  // Re-check against what the metadata left (parse_header checked against the whole file).
  if (n_tensors > left() / kMinTensorInfoBytes) {
    return data_loss("tensor infos: " + num(n_tensors) + " tensor infos need at least " +
                     num(n_tensors * kMinTensorInfoBytes) + " bytes, only " + num(left()) +
                     " left after the metadata at byte " + num(pos_));
  }
  f_->tensors_.resize(n_tensors);
  f_->tensor_index_.reserve(n_tensors);
  name_at_.reserve(n_tensors);
  offset_at_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    entry_ = i;
    entry_name_ = {};
    TS_RETURN_IF_ERROR(parse_one_tensor_info(i, &f_->tensors_[i]));
  }

  auto& index = f_->tensor_index_;
  std::stable_sort(index.begin(), index.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 1; i < index.size(); ++i) {
    if (index[i].first != index[i - 1].first) continue;
    entry_ = index[i].second;
    entry_name_ = index[i].first;
    return fail(name_at_[entry_], "duplicate tensor name (first at tensor #" + num(index[i - 1].second) + ")");
  }

  // The data section starts at the aligned end of the tensor infos.
  if (!checked_align_up(pos_, f_->alignment_, &f_->data_offset_)) {
    return fail(pos_, "data section offset overflows");  // cannot happen: pos_ <= size
  }
  return Status::ok();
}

Status Parser::parse_one_tensor_info(uint64_t index, TensorInfo* t) {
  const uint64_t name_at = pos_;
  std::string_view name;
  TS_RETURN_IF_ERROR(read_string("name", kMaxNameBytes, &name));
  if (name.empty()) return fail(name_at, "tensor name is empty");
  size_t bad = 0;
  if (!is_valid_utf8(name, &bad)) {
    return fail(name_at + 8 + bad, "name '" + escape_for_message(name) + "' is not valid UTF-8 (bad byte at +" +
                                       num(bad) + ")");
  }
  entry_name_ = name;
  t->name = std::string(name);

  const uint64_t dims_at = pos_;
  TS_RETURN_IF_ERROR(read_u32("n_dims", &t->n_dims));
  if (t->n_dims == 0 || t->n_dims > kMaxDims) {
    return fail(dims_at, "n_dims " + num(t->n_dims) + " is out of range (want 1.." + num(kMaxDims) + ")");
  }
  const uint64_t ne_at = pos_;
  for (uint32_t d = 0; d < t->n_dims; ++d) {
    const uint64_t at = pos_;
    uint64_t ne = 0;
    TS_RETURN_IF_ERROR(read_u64("dimension", &ne));
    // The file stores int64: a value with the top bit set is negative.
    if (ne > uint64_t(std::numeric_limits<int64_t>::max())) {
      return fail(at, "ne[" + num(d) + "] is negative (" + std::to_string(int64_t(ne)) + ")");
    }
    if (ne == 0) return fail(at, "ne[" + num(d) + "] is 0");
    t->ne[d] = int64_t(ne);
  }
  const uint64_t type_at = pos_;
  uint32_t type_id = 0;
  TS_RETURN_IF_ERROR(read_u32("type", &type_id));
  const uint64_t offset_at = pos_;
  TS_RETURN_IF_ERROR(read_u64("offset", &t->offset));

  const std::optional<DTypeLayout> layout = dtype_layout(type_id);
  if (!layout) return fail(StatusCode::kUnimplemented, type_at, "unknown tensor type " + num(type_id));
  t->type = DType(type_id);

  uint64_t n_elements = 1;
  for (uint32_t d = 0; d < t->n_dims; ++d) {
    if (!checked_mul(n_elements, uint64_t(t->ne[d]), &n_elements) ||
        n_elements > uint64_t(std::numeric_limits<int64_t>::max())) {
      return fail(ne_at, "shape " + t->shape_string() + ": element count overflows int64");
    }
  }
  if (uint64_t(t->ne[0]) % layout->block_size != 0) {
    return fail(ne_at, "ne[0] = " + num(uint64_t(t->ne[0])) + " is not a multiple of the block size " +
                           num(layout->block_size) + " of " + layout->name);
  }
  // dtype_row_bytes() does not check for overflow; do it here.
  uint64_t row_bytes = 0;
  if (!checked_mul(uint64_t(t->ne[0]) / layout->block_size, layout->type_size, &row_bytes) ||
      !checked_mul(row_bytes, uint64_t(t->n_rows()), &t->n_bytes)) {
    return fail(ne_at, "shape " + t->shape_string() + " of " + layout->name + ": byte size overflows");
  }
  if (t->offset % f_->alignment_ != 0) {
    return fail(offset_at, "offset " + num(t->offset) + " is not a multiple of the alignment " + num(f_->alignment_));
  }
  f_->tensor_index_.emplace_back(name, uint32_t(index));
  name_at_.push_back(name_at);
  offset_at_.push_back(offset_at);
  return Status::ok();
}

// ---------------------------------------------------------------- tensor data

Status Parser::check_tensor_data() {
  section_ = Section::kTensorData;
  auto& ts = f_->tensors_;
  const uint64_t size = b_.size();
  for (size_t i = 0; i < ts.size(); ++i) {
    entry_ = i;
    entry_name_ = ts[i].name;
    uint64_t begin = 0, end = 0;
    if (!checked_add(f_->data_offset_, ts[i].offset, &begin) || !checked_add(begin, ts[i].n_bytes, &end)) {
      return fail(offset_at_[i], "data offset " + num(ts[i].offset) + " + " + num(ts[i].n_bytes) +
                                     " bytes overflows");
    }
    if (end > size) {
      return fail(offset_at_[i], "data [" + num(begin) + ", " + num(end) + ") runs past end of file (size " +
                                     num(size) + ")");
    }
    ts[i].data = b_.data() + begin;
  }

  // Overlaps: in offset order, each tensor must start at or after the previous one's end.
  std::vector<uint32_t> order(ts.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return ts[a].offset < ts[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = ts[order[k - 1]];
    const TensorInfo& cur = ts[order[k]];
    if (prev.offset + prev.n_bytes <= cur.offset) continue;  // no overflow: both checked above
    entry_ = order[k];
    entry_name_ = cur.name;
    const uint64_t base = f_->data_offset_;
    return fail(offset_at_[order[k]], "data [" + num(base + cur.offset) + ", " + num(base + cur.offset + cur.n_bytes) +
                                          ") overlaps tensor '" + escape_for_message(prev.name) + "' (#" +
                                          num(order[k - 1]) + ") data [" + num(base + prev.offset) + ", " +
                                          num(base + prev.offset + prev.n_bytes) + ")");
  }
  entry_name_ = {};
  return Status::ok();
}

}  // namespace ts::gguf
