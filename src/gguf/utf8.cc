#include "utf8.h"

#include <cstdint>

#include "core/utf8.h"

namespace ts::gguf {

size_t utf8_sequence_length(std::string_view s, size_t i) {
  const utf8::Step st = utf8::scan(s, i);
  return st.status == utf8::Scan::kOk ? st.len : 0;
}

bool is_valid_utf8(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {  // ASCII fast path: most keys and names are ASCII
      ++i;
      continue;
    }
    const utf8::Step st = utf8::scan(s, i);
    if (st.status != utf8::Scan::kOk) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += st.len;
  }
  return true;
}

std::string escape_for_message(std::string_view s, size_t max_bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  const size_t limit = s.size() < max_bytes ? s.size() : max_bytes;
  out.reserve(limit + 8);
  const auto hex = [&](uint8_t c) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  };
  size_t i = 0;
  while (i < limit) {
    const uint8_t c = uint8_t(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F || c == '\\' || c == '\'' || c == '"') {
        hex(c);
      } else {
        out += char(c);
      }
      ++i;
      continue;
    }
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0 || i + n > limit) {
      hex(c);
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  if (limit < s.size()) out += "...";
  return out;
}

}  // namespace ts::gguf
