// gguf-info output. Text for people (aligned columns, escaped strings, arrays cut after a
// few items); JSON for scripts (same content, strings complete).
#include "gguf/dump.h"

#include <cinttypes>
#include <cstdarg>
#include <cmath>
#include <cstdio>

#include "utf8.h"

namespace ts::gguf {
namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  va_list ap, ap2;
  va_start(ap, f);
  va_copy(ap2, ap);
  const int n = std::vsnprintf(nullptr, 0, f, ap);
  va_end(ap);
  std::string s;
  if (n > 0) {
    s.resize(size_t(n) + 1);
    std::vsnprintf(s.data(), s.size(), f, ap2);
    s.resize(size_t(n));
  }
  va_end(ap2);
  return s;
}

std::string type_string(const Value& v) {
  if (!v.is_array()) return value_type_name(v.type());
  return std::string("array<") + value_type_name(v.elem_type()) + ">";
}

std::string float_text(double d, ValueType t) {
  return t == ValueType::kFloat32 ? fmt("%.9g", d) : fmt("%.17g", d);
}

// ---------------------------------------------------------------- text

std::string text_scalar(const Value& v, const DumpOptions& opt) {
  switch (v.type()) {
    case ValueType::kString: return "\"" + escape_for_message(*v.as_string(), opt.max_string_bytes) + "\"";
    case ValueType::kBool: return *v.as_bool() ? "true" : "false";
    case ValueType::kFloat32:
    case ValueType::kFloat64: return float_text(*v.as_float(), v.type());
    case ValueType::kUint64: return std::to_string(*v.as_uint());
    default: return std::to_string(*v.as_int());
  }
}

std::string text_array(const Value& v, const DumpOptions& opt) {
  std::string s = "[" + std::to_string(v.size()) + "] [";
  const uint64_t n = v.size() < opt.max_array_items ? v.size() : opt.max_array_items;
  for (uint64_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    const ValueType t = v.elem_type();
    if (t == ValueType::kString) {
      s += "\"" + escape_for_message(v.string_at(i), 40) + "\"";
    } else if (t == ValueType::kArray) {
      s += "array<" + std::string(value_type_name(v.array_at(i).elem_type())) + ">[" +
           std::to_string(v.array_at(i).size()) + "]";
    } else if (is_float_type(t)) {
      s += float_text(v.float_at(i), t);
    } else if (t == ValueType::kUint64) {
      s += std::to_string(uint64_t(v.int_at(i)));
    } else if (t == ValueType::kBool) {
      s += v.int_at(i) ? "true" : "false";
    } else {
      s += std::to_string(v.int_at(i));
    }
  }
  if (n < v.size()) s += ", ...";
  return s + "]";
}

// ---------------------------------------------------------------- JSON

void json_string(std::string& out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = uint8_t(s[i]);
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += char(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20 || c == 0x7F) {
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
      } else {
        out += char(c);
      }
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  out += '"';
}

void json_number(std::string& out, double d, ValueType t) { out += std::isfinite(d) ? float_text(d, t) : "null"; }

void json_value(std::string& out, const Value& v, const DumpOptions& opt);

void json_element(std::string& out, const Value& v, uint64_t i, const DumpOptions& opt) {
  const ValueType t = v.elem_type();
  if (t == ValueType::kString) {
    json_string(out, v.string_at(i));
  } else if (t == ValueType::kArray) {
    json_value(out, v.array_at(i), opt);
  } else if (is_float_type(t)) {
    json_number(out, v.float_at(i), t);
  } else if (t == ValueType::kUint64) {
    out += std::to_string(uint64_t(v.int_at(i)));
  } else if (t == ValueType::kBool) {
    out += v.int_at(i) ? "true" : "false";
  } else {
    out += std::to_string(v.int_at(i));
  }
}

// Arrays become {"elem_type", "length", "head": [first items]}; scalars their value.
void json_value(std::string& out, const Value& v, const DumpOptions& opt) {
  switch (v.type()) {
    case ValueType::kString: json_string(out, *v.as_string()); return;
    case ValueType::kBool: out += *v.as_bool() ? "true" : "false"; return;
    case ValueType::kFloat32:
    case ValueType::kFloat64: json_number(out, *v.as_float(), v.type()); return;
    case ValueType::kUint64: out += std::to_string(*v.as_uint()); return;
    case ValueType::kArray: break;
    default: out += std::to_string(*v.as_int()); return;
  }
  out += "{\"elem_type\":\"";
  out += value_type_name(v.elem_type());
  out += "\",\"length\":" + std::to_string(v.size()) + ",\"head\":[";
  const uint64_t n = v.size() < opt.max_array_items ? v.size() : opt.max_array_items;
  for (uint64_t i = 0; i < n; ++i) {
    if (i) out += ',';
    json_element(out, v, i, opt);
  }
  out += "]}";
}

uint64_t total_elements(const File& f) {
  uint64_t n = 0;
  for (const auto& t : f.tensors()) n += uint64_t(t.n_elements());
  return n;
}

}  // namespace

std::string describe_text(const File& f, const DumpOptions& opt) {
  std::string out;
  out += fmt("GGUF v%u, alignment %" PRIu64 ", data offset %" PRIu64 ", file size %zu bytes\n", f.version(),
             f.alignment(), f.data_offset(), f.bytes().size());
  out += fmt("metadata: %zu keys\n", f.metadata().size());
  for (const auto& [key, v] : f.metadata()) {
    out += fmt("  %-40s %-15s ", escape_for_message(key).c_str(), type_string(v).c_str());
    out += v.is_array() ? text_array(v, opt) : text_scalar(v, opt);
    out += '\n';
  }
  if (opt.tensors) {
    out += fmt("tensors: %zu\n", f.tensors().size());
    if (!f.tensors().empty()) {
      out += fmt("  %5s  %-40s %-6s %-24s %14s %14s\n", "#", "name", "type", "shape", "offset", "bytes");
    }
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const TensorInfo& t = f.tensors()[i];
      out += fmt("  %5zu  %-40s %-6s %-24s %14" PRIu64 " %14" PRIu64 "\n", i, escape_for_message(t.name).c_str(),
                 dtype_name(t.type), t.shape_string().c_str(), t.offset, t.n_bytes);
    }
  }
  const uint64_t bytes = f.tensor_bytes();
  const double share = f.bytes().empty() ? 0.0 : 100.0 * double(bytes) / double(f.bytes().size());
  out += fmt("total: %zu tensors, %" PRIu64 " elements, %" PRIu64 " bytes (%.1f%% of the file)\n",
             f.tensors().size(), total_elements(f), bytes, share);
  return out;
}

std::string describe_json(const File& f, const DumpOptions& opt) {
  std::string out = "{";
  out += fmt("\"version\":%u,\"alignment\":%" PRIu64 ",\"data_offset\":%" PRIu64 ",\"file_size\":%zu,", f.version(),
             f.alignment(), f.data_offset(), f.bytes().size());
  out += "\"metadata\":[";
  bool first = true;
  for (const auto& [key, v] : f.metadata()) {
    out += first ? "{" : ",{";
    first = false;
    out += "\"key\":";
    json_string(out, key);
    out += ",\"type\":\"";
    out += value_type_name(v.type());
    out += "\",\"value\":";
    json_value(out, v, opt);
    out += '}';
  }
  out += "]";
  if (opt.tensors) {
    out += ",\"tensors\":[";
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const TensorInfo& t = f.tensors()[i];
      out += i ? ",{" : "{";
      out += "\"name\":";
      json_string(out, t.name);
      out += ",\"type\":\"";
      out += dtype_name(t.type);
      out += "\",\"shape\":[";
      for (uint32_t d = 0; d < t.n_dims; ++d) out += (d ? "," : "") + std::to_string(t.ne[d]);
      out += fmt("],\"offset\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", t.offset, t.n_bytes);
    }
    out += "]";
  }
  out += fmt(",\"totals\":{\"n_tensors\":%zu,\"n_elements\":%" PRIu64 ",\"bytes\":%" PRIu64 "}}\n",
             f.tensors().size(), total_elements(f), f.tensor_bytes());
  return out;
}

}  // namespace ts::gguf
