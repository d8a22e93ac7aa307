#include "core/utf8.h"

namespace ts::utf8 {

Step scan(const char* p, size_t n) {
  const uint8_t b0 = uint8_t(p[0]);
  if (b0 < 0x80) return {Scan::kOk, 1, b0};
  uint32_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;       // no overlong forms
    else if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;       // no overlong forms
    else if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Scan::kInvalid, 1, 0};   // continuation byte, C0, C1, F5..FF
  }
  for (uint32_t k = 1; k < len; ++k) {
    if (k >= n) return {Scan::kIncomplete, uint32_t(n), 0};
    const uint8_t b = uint8_t(p[k]);
    const uint8_t klo = k == 1 ? lo : 0x80, khi = k == 1 ? hi : 0xBF;
    if (b < klo || b > khi) return {Scan::kInvalid, k, 0};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Scan::kOk, len, cp};
}

void append_cp(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Step st = scan(s, i);
    if (st.status != Scan::kOk) return false;
    i += st.len;
  }
  return true;
}

}  // namespace ts::utf8
