// AVX2 vec_dot of the GGUF row layout for Q8_0 and Q4_0 (e.g. a quantized KV cache).
// Integer block sums in SIMD, then the scalar kernels' float chain (acc = fma(float(isum),
// dw * dx, acc) block by block), so the result is bit-identical to every other path.
#include <immintrin.h>

#include <cmath>

#include "core/fp16.h"
#include "gemm_avx2.h"
#include "quant_blocks.h"

namespace ts::kernels::avx2 {
namespace {

inline int hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// sum(w * x) of 32 signed levels each (|x| <= 127 so a pair sum is at most 32512).
inline int dot32(__m256i w, __m256i x) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return hsum(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

float vec_dot_q8_0(int64_t n, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const int isum = dot32(load32(wb[i].qs), load32(xb[i].qs));
    acc = std::fma(float(isum), fp16_to_f32(wb[i].d) * fp16_to_f32(xb[i].d), acc);
  }
  return acc;
}

float vec_dot_q4_0(int64_t n, const void* w, const void* x) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* xb = static_cast<const BlockQ8_0*>(x);
  const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  float acc = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb[i].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), eight);                     // columns 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight);  // 16..31
    const int isum = dot32(_mm256_set_m128i(hi, lo), load32(xb[i].qs));
    acc = std::fma(float(isum), fp16_to_f32(wb[i].d) * fp16_to_f32(xb[i].d), acc);
  }
  return acc;
}

}  // namespace

VecDotFn quant_vec_dot(DType t) {
  switch (t) {
    case DType::Q8_0:
      return vec_dot_q8_0;
    case DType::Q4_0:
      return vec_dot_q4_0;
    default:
      return nullptr;
  }
}

}  // namespace ts::kernels::avx2
