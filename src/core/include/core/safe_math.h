// Overflow-checked arithmetic for sizes read from untrusted files.
#pragma once

#include <cstdint>

namespace ts {

// Each returns false (and leaves *out unspecified) on overflow.
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Round `x` up to a multiple of `align` (a power of two or any positive value).
inline bool checked_align_up(uint64_t x, uint64_t align, uint64_t* out) {
  if (align == 0) return false;
  uint64_t rem = x % align;
  if (rem == 0) { *out = x; return true; }
  return checked_add(x, align - rem, out);
}

}  // namespace ts
