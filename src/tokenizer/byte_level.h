// GPT-2's byte-level alphabet: every byte is written as one printable character, so that
// byte-level BPE vocabularies hold only printable text. Bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF stand for themselves (as U+0021.., U+00A1..); the other 68 bytes (controls,
// space, 0x7F..0xA0, 0xAD) map in order to U+0100, U+0101, ... (space is U+0120 "Ġ").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ts::tok::detail {

class ByteLevel {
 public:
  static const ByteLevel& get();

  // The UTF-8 of the character that stands for byte `b`.
  std::string_view encode(uint8_t b) const { return {enc_[b].data(), enc_len_[b]}; }
  void encode_append(std::string_view bytes, std::string& out) const {
    for (unsigned char b : bytes) out.append(encode(b));
  }
  // Byte for code point `cp`, or -1 when `cp` is not in the alphabet.
  int decode(uint32_t cp) const { return cp < kMaxCp ? dec_[cp] : -1; }
  // Decodes byte-level text; characters outside the alphabet are copied unchanged.
  void decode_append(std::string_view text, std::string& out) const;

 private:
  ByteLevel();
  static constexpr uint32_t kMaxCp = 0x144;  // 256 + 68
  std::array<std::array<char, 2>, 256> enc_{};
  std::array<uint8_t, 256> enc_len_{};
  std::array<int16_t, kMaxCp> dec_{};
};

}  // namespace ts::tok::detail
