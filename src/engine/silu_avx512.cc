// AVX-512 SwiGLU: silu_avx2.cc's computation, 16 lanes at a time. exp(t) is the same
// double evaluation (t = n ln2 + r, e^r by its Taylor series to degree 11, times 2^n),
// with the same operations in the same order per lane, so the result is bit-identical to
// swiglu_avx2 (ops_test); only the width differs (8 doubles per register instead of 4).
// GCC 12 warns about the unused pass-through operand of masked AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

#include "ops_internal.h"

namespace ts::engine::ops::detail {
namespace {

constexpr double kInvFact[] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040, 1.0 / 720,
                               1.0 / 120,      1.0 / 24,      1.0 / 6,      0.5,          1.0,        1.0};

// exp of 16 floats: two registers of 8 doubles, their polynomials interleaved (two
// independent FMA chains), each rounded to float once at the end.
inline __m512 exp16(__m512 t) {
  t = _mm512_max_ps(_mm512_min_ps(t, _mm512_set1_ps(87.0f)), _mm512_set1_ps(-87.0f));
  __m512d x[2] = {_mm512_cvtps_pd(_mm512_castps512_ps256(t)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(t, 1))};
  __m512d n[2], r[2], p[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    n[h] = _mm512_roundscale_pd(_mm512_mul_pd(x[h], _mm512_set1_pd(1.4426950408889634)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[h] = _mm512_fnmadd_pd(n[h], _mm512_set1_pd(0x1.62e42ffp-1), x[h]);
    r[h] = _mm512_fnmadd_pd(n[h], _mm512_set1_pd(-4.2009150726810846e-11), r[h]);
    p[h] = _mm512_set1_pd(kInvFact[0]);
  }
#pragma GCC unroll 12
  for (int k = 1; k < 12; ++k) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) p[h] = _mm512_fmadd_pd(p[h], r[h], _mm512_set1_pd(kInvFact[k]));
  }
  __m256 y[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i ni = _mm512_cvtpd_epi32(n[h]);
    const __m512i e = _mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm256_add_epi32(ni, _mm256_set1_epi32(1023))), 52);
    y[h] = _mm512_cvtpd_ps(_mm512_mul_pd(p[h], _mm512_castsi512_pd(e)));
  }
  return _mm512_insertf32x8(_mm512_castps256_ps512(y[0]), y[1], 1);
}

}  // namespace

void swiglu_avx512(const float* g, const float* u, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  const __m512 inf = _mm512_set1_ps(__builtin_inff()), limit = _mm512_set1_ps(-87.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    __m512 den = _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, x)));
    den = _mm512_mask_mov_ps(den, _mm512_cmp_ps_mask(x, limit, _CMP_LT_OQ), inf);  // exp(-x) overflows: -0
    const __m512 s = _mm512_div_ps(x, den);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(s, _mm512_loadu_ps(u + i)));
  }
  if (i < n) swiglu_avx2(g + i, u + i, y + i, n - i);
}

}  // namespace ts::engine::ops::detail
