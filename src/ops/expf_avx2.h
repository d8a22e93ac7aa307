// e^x of 8 floats at once, equal to the C library's expf (std::exp(float)) for every x:
// the construction of expf_avx512.h (e^x evaluated in double, relative error < 1e-14, and
// rounded once; lanes within 2^-8 ulp of a rounding midpoint take the libm call) with
// AVX2's operations. Internal linkage: include only from files compiled with the AVX2 flags
// (*_avx2.cc).
#pragma once

#include <immintrin.h>

#include <cmath>

#include "ops_internal.h"  // kExpInvFact

namespace ts::ops::detail {
namespace {
namespace expf_avx2_impl {

#define TS_EXPF_INLINE inline __attribute__((always_inline))

// 2^(biased - 1023) per 64-bit lane (biased in [1, 2046]). After the clamp n is in [-289,
// 129]: a normal double, so the products by it are exact, as scalef's.
TS_EXPF_INLINE __m256d pow2(__m256i biased) { return _mm256_castsi256_pd(_mm256_slli_epi64(biased, 52)); }

// e^t in double for 4 floats t in [-200, 89].
TS_EXPF_INLINE __m256d exp4_double(__m128 t) {
  const __m256d d = _mm256_cvtps_pd(t);
  const __m256d n =
      _mm256_round_pd(_mm256_mul_pd(d, _mm256_set1_pd(1.4426950408889634)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(0x1.62e42ffp-1), d);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(-4.2009150726810846e-11), r);
  __m256d p = _mm256_set1_pd(kExpInvFact[0]);
#pragma GCC unroll 12
  for (int k = 1; k < 12; ++k) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kExpInvFact[k]));
  const __m256i ni = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
  return _mm256_mul_pd(p, pow2(_mm256_add_epi64(ni, _mm256_set1_epi64x(1023))));
}

// Lanes of y (positive, normal doubles) within 2^-8 float ulp of a rounding midpoint, as a
// 4-bit mask. The ulp of y's float binade is 2^(e - 23), e = max(exponent, -126): z = y /
// ulp is y * 2^(23 - e), whose biased exponent 2069 - biased(y) is capped at 1023 + 149.
TS_EXPF_INLINE int near_midpoint(__m256d y) {
  const __m256i ex = _mm256_srli_epi64(_mm256_castpd_si256(y), 52);
  const __m256i f = _mm256_min_epi32(_mm256_sub_epi64(_mm256_set1_epi64x(2069), ex), _mm256_set1_epi64x(1172));
  const __m256d z = _mm256_mul_pd(y, pow2(f));
  const __m256d frac = _mm256_sub_pd(z, _mm256_floor_pd(z));
  const __m256d dist = _mm256_andnot_pd(_mm256_set1_pd(-0.0), _mm256_sub_pd(frac, _mm256_set1_pd(0.5)));
  return _mm256_movemask_pd(_mm256_cmp_pd(dist, _mm256_set1_pd(0x1p-8), _CMP_LT_OQ));
}

}  // namespace expf_avx2_impl

// Lanes in `active` (an 8-bit mask) get libm's expf(x); the others the double evaluation
// only. The clamp's max/min return their second operand when it is NaN: NaN passes.
TS_EXPF_INLINE __m256 expf8(__m256 x, int active = 0xff) {
  using namespace expf_avx2_impl;
  const __m256 t = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-200.0f), x));
  const __m256d lo = exp4_double(_mm256_castps256_ps128(t)), hi = exp4_double(_mm256_extractf128_ps(t, 1));
  __m256 out = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
  const int slow = active & (near_midpoint(lo) | near_midpoint(hi) << 4);
  if (__builtin_expect(slow != 0, 0)) {
    alignas(32) float xs[8], ys[8];
    _mm256_store_ps(xs, x);
    _mm256_store_ps(ys, out);
    for (int m = slow; m != 0; m &= m - 1) {
      const int i = __builtin_ctz(unsigned(m));
      ys[i] = std::exp(xs[i]);
    }
    out = _mm256_load_ps(ys);
  }
  return out;
}

}  // namespace
}  // namespace ts::ops::detail
