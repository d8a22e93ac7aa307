#include "utf8.h"

#include <cstdint>

namespace ts::gguf {
namespace {

// Length of the well-formed sequence starting at s[i], or 0 when it is not well-formed.
// The ranges of the second byte follow RFC 3629's grammar, which excludes overlong forms
// and surrogates without decoding the code point.
size_t sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return uint8_t(s[i + k]); };
  const size_t left = s.size() - i;
  const uint8_t c = b(0);
  if (c < 0x80) return 1;
  const auto cont = [&](size_t k) { return k < left && (b(k) & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 2) return 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c == 0xE0) lo = 0xA0;  // overlong below U+0800
    if (c == 0xED) hi = 0x9F;  // surrogates U+D800..U+DFFF
    if (b(1) < lo || b(1) > hi) return 0;
    return cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 2) return 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c == 0xF0) lo = 0x90;  // overlong below U+10000
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    if (b(1) < lo || b(1) > hi) return 0;
    return cont(2) && cont(3) ? 4 : 0;
  }
  return 0;  // 0x80..0xC1 (continuation or overlong lead), 0xF5..0xFF
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t i) { return sequence_length(s, i); }

bool is_valid_utf8(std::string_view s, size_t* bad_offset) {
  size_t i = 0;
  while (i < s.size()) {
    if (uint8_t(s[i]) < 0x80) {  // ASCII fast path: most keys and names are ASCII
      ++i;
      continue;
    }
    size_t n = sequence_length(s, i);
    if (n == 0) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += n;
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
    size_t n = sequence_length(s, i);
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
