// AVX-512 SwiGLU: silu_avx2.cc's computation, 16 lanes at a time. exp(t) is the same
// double evaluation (t = n ln2 + r, e^r by its Taylor series to degree 11, times 2^n; the
// one of expf_avx512.h), with the same operations in the same order per lane, so the
// result is bit-identical to swiglu_avx2 (ops_test); only the width differs.
// GCC 12 warns about the unused pass-through operand of masked AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

#include "expf_avx512.h"
#include "ops_internal.h"

namespace ts::ops::detail {
namespace {

// e^t for 16 floats, t clamped to [-87, 87] as in silu_avx2.cc: expf_avx512.h's double
// evaluation, rounded to float once.
inline __m512 exp16(__m512 t) {
  t = _mm512_max_ps(_mm512_min_ps(t, _mm512_set1_ps(87.0f)), _mm512_set1_ps(-87.0f));
  __m512d y[2];
  exp16_double(t, y);
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(y[0])), _mm512_cvtpd_ps(y[1]), 1);
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

}  // namespace ts::ops::detail
