// F16 rows to and from 8 floats for the AVX2 attention files (ops_avx2.cc, attn_avx2.cc).
// Internal linkage: include only from files compiled with the AVX2 flags (*_avx2.cc).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ts::ops::detail {
namespace {

inline __attribute__((always_inline)) __m256 load_h8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// Converted into a register, then stored: the empty asm keeps GCC from folding the two into
// vcvtps2ph's memory form, which is slower on Zen 4 (attn_bench f16_update/ymm vs ymm_reg).
inline __attribute__((always_inline)) void store_h8(uint16_t* p, __m256 v) {
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  asm("" : "+x"(h));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}
// v rounded to F16 and back, in registers (a store and reload of the halves).
inline __attribute__((always_inline)) __m256 round_h8(__m256 v) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace
}  // namespace ts::ops::detail
