#include "byte_level.h"

#include "core/utf8.h"

namespace ts::tok::detail {

const ByteLevel& ByteLevel::get() {
  static const ByteLevel table;
  return table;
}

ByteLevel::ByteLevel() {
  dec_.fill(-1);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const uint32_t cp = printable ? b : next++;
    std::string s;
    utf8::append_cp(s, cp);
    enc_len_[b] = uint8_t(s.size());
    for (size_t i = 0; i < s.size(); ++i) enc_[b][i] = s[i];
    dec_[cp] = int16_t(b);
  }
}

void ByteLevel::decode_append(std::string_view text, std::string& out) const {
  for (size_t i = 0; i < text.size();) {
    const utf8::Step st = utf8::scan(text, i);
    const uint32_t len = st.status == utf8::Scan::kOk ? st.len : 1;
    const int b = st.status == utf8::Scan::kOk ? decode(st.cp) : -1;
    if (b >= 0) {
      out += char(b);
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
}

}  // namespace ts::tok::detail
