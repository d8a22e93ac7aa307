// AVX2 + F16C version of ops::geglu_tanh_f16 (called only when the CPU has them): the same
// F16 rounding of the input (round to nearest even) and the same table, 8 lanes at a time.
#include <immintrin.h>

#include <cstdint>

#include "ops_internal.h"

namespace ts::ops::detail {

void geglu_tanh_f16_avx2(const float* table, const float* g, const float* u, float* y, int64_t n) {
  const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    const __m256 uv = _mm256_loadu_ps(u + i);
    const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    __m256 r = _mm256_mul_ps(_mm256_i32gather_ps(table, h, 4), uv);
    r = _mm256_blendv_ps(r, _mm256_mul_ps(x, uv), _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
    r = _mm256_blendv_ps(r, zero, _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
    _mm256_storeu_ps(y + i, r);
  }
  geglu_tanh_f16_scalar(table, g + i, u + i, y + i, n - i);  // the tail: the reference row
}

}  // namespace ts::ops::detail
