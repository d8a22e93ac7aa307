// UTF-8 scanning by the Unicode rules (Table 3-7 of the standard): well-formed sequences,
// maximal ill-formed subparts (each replaced by one U+FFFD), and sequences cut short by the
// end of the input. The one UTF-8 decoder: the tokenizer splits text into characters and
// keeps streamed output valid with it, the GGUF reader validates names with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ts::utf8 {

enum class Scan : uint8_t {
  kOk,          // a well-formed sequence of `len` bytes encoding `cp`
  kInvalid,     // `len` (>= 1) bytes that can never start a character: one U+FFFD
  kIncomplete,  // all remaining bytes are a proper prefix of a well-formed sequence
};

struct Step {
  Scan status;
  uint32_t len;
  uint32_t cp;  // kOk only
};

// Scans the sequence at p[0]; `n` >= 1 bytes are available.
Step scan(const char* p, size_t n);

inline Step scan(std::string_view s, size_t pos) { return scan(s.data() + pos, s.size() - pos); }

// Bytes of the character (or of the single invalid byte) at `pos`: the length of a
// well-formed sequence, else 1.
inline uint32_t char_len(std::string_view s, size_t pos) {
  const Step st = scan(s, pos);
  return st.status == Scan::kOk ? st.len : 1;
}

void append_cp(std::string& out, uint32_t cp);

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// True when `s` is entirely well-formed UTF-8.
bool is_valid(std::string_view s);

}  // namespace ts::utf8
