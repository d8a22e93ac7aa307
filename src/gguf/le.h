// Little-endian encoding and decoding of the fixed-size fields of a GGUF file. Written
// with shifts rather than memcpy so the code is right on any host; compilers turn these
// into single loads and stores on x86.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace ts::gguf::le {

inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline uint64_t load_u64(const uint8_t* p) { return uint64_t(load_u32(p)) | (uint64_t(load_u32(p + 4)) << 32); }
inline float load_f32(const uint8_t* p) {
  uint32_t u = load_u32(p);
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline double load_f64(const uint8_t* p) {
  uint64_t u = load_u64(p);
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

inline void put_u8(std::vector<uint8_t>& out, uint8_t v) { out.push_back(v); }
inline void put_u16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(uint8_t(v));
  out.push_back(uint8_t(v >> 8));
}
inline void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
inline void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(uint8_t(v >> (8 * i)));
}
inline void put_f32(std::vector<uint8_t>& out, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  put_u32(out, u);
}
inline void put_f64(std::vector<uint8_t>& out, double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  put_u64(out, u);
}
// A GGUF string: u64 length, then the bytes (no terminator).
inline void put_str(std::vector<uint8_t>& out, std::string_view s) {
  put_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

}  // namespace ts::gguf::le
