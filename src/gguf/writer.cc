// Writer: GGUF v3 output. The metadata and tensor infos are encoded into one buffer
// (small: a vocabulary is a few MB); tensor data is streamed from the caller's buffers
// with zero padding between tensors, so a 1 GB model is not held twice.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "core/check.h"
#include "core/safe_math.h"
#include "gguf/gguf.h"
#include "le.h"
#include "utf8.h"

namespace ts::gguf {
namespace {

constexpr uint32_t kWriteVersion = 3;

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Expected data size of a tensor, or nullopt when the shape or type is invalid.
std::optional<uint64_t> expected_bytes(DType type, const std::vector<int64_t>& ne) {
  auto layout = dtype_layout(uint32_t(type));
  if (!layout || ne.empty() || ne.size() > kMaxDims) return std::nullopt;
  uint64_t rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 1) return std::nullopt;
    if (d > 0 && !checked_mul(rows, uint64_t(ne[d]), &rows)) return std::nullopt;
  }
  if (uint64_t(ne[0]) % layout->block_size != 0) return std::nullopt;
  uint64_t n = 0;
  if (!checked_mul(dtype_row_bytes(*layout, uint64_t(ne[0])), rows, &n)) return std::nullopt;
  return n;
}

uint64_t padding(uint64_t pos, uint64_t align) { return (align - pos % align) % align; }

}  // namespace

// ---------------------------------------------------------------- adding values

void Writer::add_scalar(std::string key, ValueType type, const void* le_bytes, size_t n) {
  const auto* p = static_cast<const uint8_t*>(le_bytes);
  kv_.push_back({std::move(key), type, type, std::vector<uint8_t>(p, p + n)});
}

void Writer::add_u8(std::string key, uint8_t v) { add_scalar(std::move(key), ValueType::kUint8, &v, 1); }
void Writer::add_i8(std::string key, int8_t v) { add_scalar(std::move(key), ValueType::kInt8, &v, 1); }
void Writer::add_bool(std::string key, bool v) {
  uint8_t b = v ? 1 : 0;
  add_scalar(std::move(key), ValueType::kBool, &b, 1);
}

// Multi-byte scalars go through le:: so the bytes are little-endian on any host.
#define TS_GGUF_ADD_SCALAR(fn, T, vt, put)        \
  void Writer::fn(std::string key, T v) {         \
    std::vector<uint8_t> b;                       \
    le::put(b, v);                                \
    add_scalar(std::move(key), vt, b.data(), b.size()); \
  }
TS_GGUF_ADD_SCALAR(add_u16, uint16_t, ValueType::kUint16, put_u16)
TS_GGUF_ADD_SCALAR(add_i16, int16_t, ValueType::kInt16, put_u16)
TS_GGUF_ADD_SCALAR(add_u32, uint32_t, ValueType::kUint32, put_u32)
TS_GGUF_ADD_SCALAR(add_i32, int32_t, ValueType::kInt32, put_u32)
TS_GGUF_ADD_SCALAR(add_u64, uint64_t, ValueType::kUint64, put_u64)
TS_GGUF_ADD_SCALAR(add_i64, int64_t, ValueType::kInt64, put_u64)
TS_GGUF_ADD_SCALAR(add_f32, float, ValueType::kFloat32, put_f32)
TS_GGUF_ADD_SCALAR(add_f64, double, ValueType::kFloat64, put_f64)
#undef TS_GGUF_ADD_SCALAR

void Writer::add_string(std::string key, std::string v) {
  std::vector<uint8_t> b;
  le::put_str(b, v);
  kv_.push_back({std::move(key), ValueType::kString, ValueType::kString, std::move(b)});
}

void Writer::add_string_array(std::string key, std::vector<std::string> v) {
  std::vector<uint8_t> b;
  size_t total = 12;
  for (const auto& s : v) total += 8 + s.size();
  b.reserve(total);
  le::put_u32(b, uint32_t(ValueType::kString));
  le::put_u64(b, v.size());
  for (const auto& s : v) le::put_str(b, s);
  kv_.push_back({std::move(key), ValueType::kArray, ValueType::kString, std::move(b)});
}

void Writer::add_array(std::string key, ValueType elem_type, uint64_t count, std::vector<uint8_t> le_bytes) {
  const uint32_t size = value_type_size(elem_type);
  TS_CHECK_MSG(size != 0, "add_array takes fixed-size element types; use add_string_array");
  TS_CHECK(le_bytes.size() == count * size);
  std::vector<uint8_t> b;
  b.reserve(12 + le_bytes.size());
  le::put_u32(b, uint32_t(elem_type));
  le::put_u64(b, count);
  b.insert(b.end(), le_bytes.begin(), le_bytes.end());
  kv_.push_back({std::move(key), ValueType::kArray, elem_type, std::move(b)});
}

void Writer::add_f32_array(std::string key, std::vector<float> v) {
  std::vector<uint8_t> b;
  b.reserve(v.size() * 4);
  for (float f : v) le::put_f32(b, f);
  add_array(std::move(key), ValueType::kFloat32, v.size(), std::move(b));
}

void Writer::add_i32_array(std::string key, std::vector<int32_t> v) {
  std::vector<uint8_t> b;
  b.reserve(v.size() * 4);
  for (int32_t i : v) le::put_u32(b, uint32_t(i));
  add_array(std::move(key), ValueType::kInt32, v.size(), std::move(b));
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  Tensor t{std::move(name), type, std::move(ne), std::move(data), {}, false};
  tensors_.push_back(std::move(t));
}

void Writer::add_tensor_view(std::string name, DType type, std::vector<int64_t> ne, std::span<const uint8_t> data) {
  tensors_.push_back(Tensor{std::move(name), type, std::move(ne), {}, data, true});
}

// ---------------------------------------------------------------- validation

Status Writer::validate() const {
  if (!is_power_of_two(alignment_) || alignment_ > kMaxAlignment) {
    return invalid_argument("gguf writer: alignment " + std::to_string(alignment_) +
                            " must be a power of two <= " + std::to_string(kMaxAlignment));
  }
  std::set<std::string_view> seen;
  for (const auto& kv : kv_) {
    if (kv.key.empty() || kv.key.size() > kMaxNameBytes || !is_valid_utf8(kv.key))
      return invalid_argument("gguf writer: key '" + escape_for_message(kv.key) + "' is empty, too long or not UTF-8");
    if (!seen.insert(kv.key).second) return invalid_argument("gguf writer: duplicate key '" + kv.key + "'");
    if (kv.key == kAlignmentKey) {
      if (kv.type != ValueType::kUint32 || le::load_u32(kv.payload.data()) != alignment_) {
        return invalid_argument("gguf writer: general.alignment must be a uint32 equal to the Writer's alignment " +
                                std::to_string(alignment_));
      }
    }
  }
  if (kv_.size() + 1 > kMaxKv) return invalid_argument("gguf writer: too many keys");
  if (tensors_.size() > kMaxTensors) return invalid_argument("gguf writer: too many tensors");
  seen.clear();
  for (const auto& t : tensors_) {
    if (t.name.empty() || t.name.size() > kMaxNameBytes || !is_valid_utf8(t.name))
      return invalid_argument("gguf writer: tensor name '" + escape_for_message(t.name) + "' is empty, too long or not UTF-8");
    if (!seen.insert(t.name).second) return invalid_argument("gguf writer: duplicate tensor '" + t.name + "'");
    auto want = expected_bytes(t.type, t.ne);
    if (!want) {
      return invalid_argument("gguf writer: tensor '" + t.name + "': invalid shape or type " + dtype_name(t.type));
    }
    if (*want != t.bytes().size()) {
      return invalid_argument("gguf writer: tensor '" + t.name + "' has " + std::to_string(t.bytes().size()) +
                              " bytes of data, its shape and type need " + std::to_string(*want));
    }
  }
  return Status::ok();
}

// ---------------------------------------------------------------- output

template <typename Sink>
bool Writer::emit(Sink&& sink) const {
  bool has_alignment_kv = false;
  for (const auto& kv : kv_) has_alignment_kv |= kv.key == kAlignmentKey;
  const bool add_alignment = alignment_ != kDefaultAlignment && !has_alignment_kv;

  std::vector<uint8_t> head;
  head.insert(head.end(), {'G', 'G', 'U', 'F'});
  le::put_u32(head, kWriteVersion);
  le::put_u64(head, tensors_.size());
  le::put_u64(head, kv_.size() + (add_alignment ? 1 : 0));
  if (add_alignment) {  // first, so a reader knows the alignment before the tensor infos
    le::put_str(head, kAlignmentKey);
    le::put_u32(head, uint32_t(ValueType::kUint32));
    le::put_u32(head, uint32_t(alignment_));
  }
  for (const auto& kv : kv_) {
    le::put_str(head, kv.key);
    le::put_u32(head, uint32_t(kv.type));
    head.insert(head.end(), kv.payload.begin(), kv.payload.end());
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    le::put_str(head, t.name);
    le::put_u32(head, uint32_t(t.ne.size()));
    for (int64_t n : t.ne) le::put_u64(head, uint64_t(n));
    le::put_u32(head, uint32_t(t.type));
    le::put_u64(head, offset);
    offset += t.bytes().size();
    offset += padding(offset, alignment_);
  }
  head.resize(head.size() + padding(head.size(), alignment_), 0);
  if (!sink(head.data(), head.size())) return false;

  static const uint8_t kZeros[4096] = {};
  for (const auto& t : tensors_) {
    const auto data = t.bytes();
    if (!sink(data.data(), data.size())) return false;
    for (uint64_t pad = padding(data.size(), alignment_); pad > 0;) {
      const uint64_t n = pad < sizeof(kZeros) ? pad : sizeof(kZeros);
      if (!sink(kZeros, n)) return false;
      pad -= n;
    }
  }
  return true;
}

std::vector<uint8_t> Writer::to_bytes() const {
  Status s = validate();
  TS_CHECK_MSG(s.is_ok(), s.message().c_str());
  std::vector<uint8_t> out;
  emit([&](const uint8_t* p, uint64_t n) {
    out.insert(out.end(), p, p + n);
    return true;
  });
  return out;
}

Status Writer::write(const std::string& path) const {
  TS_RETURN_IF_ERROR(validate());
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return io_error("cannot create " + tmp + ": " + std::strerror(errno));
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  const bool ok = emit([&](const uint8_t* p, uint64_t n) { return n == 0 || std::fwrite(p, 1, n, f) == n; });
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp.c_str());
    return io_error("cannot write " + tmp + ": " + std::strerror(ok ? errno : err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    return io_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
  return Status::ok();
}

}  // namespace ts::gguf
