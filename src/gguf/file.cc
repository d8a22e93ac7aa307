// File: the parsed view of a GGUF file, and its look-ups. Parsing itself is in parser.cc.
#include <algorithm>

#include "gguf/gguf.h"
#include "parser.h"

namespace ts::gguf {
namespace {

// Binary search in a (name, index) list sorted by name.
const uint32_t* lookup(const std::vector<std::pair<std::string_view, uint32_t>>& index, std::string_view name) {
  auto it = std::lower_bound(index.begin(), index.end(), name,
                             [](const auto& e, std::string_view n) { return e.first < n; });
  if (it == index.end() || it->first != name) return nullptr;
  return &it->second;
}

Status wrong_type(std::string_view key, const Value& v, const char* want) {
  return data_loss("metadata key '" + std::string(key) + "' has type " + value_type_name(v.type()) + ", want " + want);
}

}  // namespace

Result<std::unique_ptr<File>> File::open(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::open(path));
  Result<std::unique_ptr<File>> r = parse(mapping->bytes());
  if (!r.is_ok()) return Status(r.status().code(), path + ": " + r.status().message());
  r.value()->mapping_ = std::move(mapping);
  return r;
}

Result<std::unique_ptr<File>> File::parse(std::span<const uint8_t> bytes) {
  std::unique_ptr<File> f(new File());
  f->bytes_ = bytes;
  Parser p(bytes, f.get());
  TS_RETURN_IF_ERROR(p.parse());
  return f;
}

const Value* File::find(std::string_view key) const {
  const uint32_t* i = lookup(kv_index_, key);
  return i ? &kv_[*i].second : nullptr;
}

Result<std::string_view> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found("metadata key '" + std::string(key) + "' is missing");
  if (auto s = v->as_string()) return *s;
  return wrong_type(key, *v, "string");
}

Result<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found("metadata key '" + std::string(key) + "' is missing");
  if (auto i = v->as_int()) return *i;
  if (v->type() == ValueType::kUint64) {
    return data_loss("metadata key '" + std::string(key) + "': uint64 value " + std::to_string(*v->as_uint()) +
                     " does not fit int64");
  }
  return wrong_type(key, *v, "an integer");
}

Result<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found("metadata key '" + std::string(key) + "' is missing");
  if (auto d = v->as_float()) return *d;
  return wrong_type(key, *v, "a number");
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found("metadata key '" + std::string(key) + "' is missing");
  if (auto b = v->as_bool()) return *b;
  return wrong_type(key, *v, "bool");
}

const Value* File::get_array(std::string_view key) const {
  const Value* v = find(key);
  return v && v->is_array() ? v : nullptr;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const uint32_t* i = lookup(tensor_index_, name);
  return i ? &tensors_[*i] : nullptr;
}

uint64_t File::tensor_bytes() const {
  uint64_t total = 0;
  // Cannot overflow: the tensors lie without overlap inside the file.
  for (const auto& t : tensors_) total += t.n_bytes;
  return total;
}

}  // namespace ts::gguf
