// UTF-8 validation for GGUF keys and tensor names, and escaping of untrusted names for
// error messages (a hostile name must not inject control characters into a log line).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ts::gguf {

// True when `s` is well-formed UTF-8 (RFC 3629): no overlong forms, no surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequences. On false,
// *bad_offset (when given) is the offset of the first byte of the bad sequence.
bool is_valid_utf8(std::string_view s, size_t* bad_offset = nullptr);

// Length (1..4) of the well-formed UTF-8 sequence starting at s[i] (i < s.size()), or 0
// when the bytes there do not start one.
size_t utf8_sequence_length(std::string_view s, size_t i);

// `s` for a message: valid printable UTF-8 as is; control characters, backslash, quotes
// and bytes of invalid sequences as \xNN; cut after `max_bytes` input bytes with "...".
std::string escape_for_message(std::string_view s, size_t max_bytes = 80);

}  // namespace ts::gguf
