// e^x of 16 floats at once, equal to the C library's expf (std::exp(float)) for every x,
// so that vectorised softmax factors keep llama.cpp's results bit for bit. Include only
// from files compiled with the AVX-512 flags (*_avx512.cc).
//
// How it can equal libm without being libm: e^x is evaluated in double (t = n ln2 + r
// with n = round(t / ln2), |r| <= ln2/2, ln2 split in two so n * hi is exact; e^r by its
// Taylor series to degree 11; times 2^n in the exponent bits), relative error < 1e-14,
// and rounded to float once. That is the correctly rounded float unless e^x lies within
// ~1e-14 relative of a rounding midpoint. glibc's expf is within 0.502 ulp of e^x, so it
// also returns the correctly rounded float whenever e^x is more than 0.002 ulp from a
// midpoint: both agree there. The lanes whose double result lies within 2^-8 ulp of a
// midpoint (~0.8% of inputs) take the libm call instead (with a threshold of 2^-12 ulp,
// glibc's own misroundings, e.g. expf(0x1.a2fe6p-9) 0.50027 ulp from e^x, show through).
// ops_test checks the equality over ~20 million inputs; once, over every float in
// [-104, 1] (2.19e9 inputs, glibc 2.36): equal with 2^-8 and 2^-9, 15434 differ with
// 2^-10 (glibc's bound of 0.502 ulp is 0.5 + 2^-8.97).
//
// Range: x is clamped to [-200, 89], where e^-200 rounds to 0 and e^89 overflows to
// infinity in float exactly as e^x does outside (so -inf gives 0 and +inf gives inf); NaN
// passes through the clamp and gives NaN.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "ops_internal.h"  // kExpInvFact

namespace ts::ops::detail {

// e^t in double for 16 floats t in [-200, 89] (lanes 0-7 in y[0], 8-15 in y[1]): the
// evaluation described above, without the final rounding. silu_avx512.cc uses it too.
inline void exp16_double(__m512 t, __m512d y[2]) {
  const __m512d d[2] = {_mm512_cvtps_pd(_mm512_castps512_ps256(t)), _mm512_cvtps_pd(_mm512_extractf32x8_ps(t, 1))};
  __m512d n[2], r[2], p[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    n[h] = _mm512_roundscale_pd(_mm512_mul_pd(d[h], _mm512_set1_pd(1.4426950408889634)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r[h] = _mm512_fnmadd_pd(n[h], _mm512_set1_pd(0x1.62e42ffp-1), d[h]);
    r[h] = _mm512_fnmadd_pd(n[h], _mm512_set1_pd(-4.2009150726810846e-11), r[h]);
    p[h] = _mm512_set1_pd(kExpInvFact[0]);
  }
#pragma GCC unroll 12
  for (int k = 1; k < 12; ++k) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) p[h] = _mm512_fmadd_pd(p[h], r[h], _mm512_set1_pd(kExpInvFact[k]));
  }
  // 2^n is exact for the range (n in [-289, 129]), and so is the product.
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) y[h] = _mm512_scalef_pd(p[h], n[h]);
}

// Lanes of `active` get e^x as above; the others get the double evaluation only (no libm
// call however close to a midpoint: their values are not used).
inline __m512 expf16(__m512 x, __mmask16 active = 0xffff) {
  // max/min return their second operand when it is NaN: NaN passes through.
  const __m512 t = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-200.0f), x));
  __m512d yd[2];
  exp16_double(t, yd);
  __m256 f[2];
  __mmask8 near[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512d y = yd[h];
    f[h] = _mm512_cvtpd_ps(y);
    // Distance to the nearest rounding midpoint, in float ulps of y's binade (2^-149 below
    // the normal range): the fraction of y / ulp.
    const __m512d e = _mm512_max_pd(_mm512_getexp_pd(y), _mm512_set1_pd(-126.0));
    const __m512d z = _mm512_scalef_pd(y, _mm512_sub_pd(_mm512_set1_pd(23.0), e));
    const __m512d frac = _mm512_sub_pd(z, _mm512_roundscale_pd(z, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    const __m512d dist = _mm512_abs_pd(_mm512_sub_pd(frac, _mm512_set1_pd(0.5)));
    near[h] = _mm512_cmp_pd_mask(dist, _mm512_set1_pd(0x1p-8), _CMP_LT_OQ);
  }
  __m512 out = _mm512_insertf32x8(_mm512_castps256_ps512(f[0]), f[1], 1);
  const __mmask16 slow = active & __mmask16(near[0] | (unsigned(near[1]) << 8));
  if (__builtin_expect(slow != 0, 0)) {
    alignas(64) float xs[16], ys[16];
    _mm512_store_ps(xs, x);
    _mm512_store_ps(ys, out);
    for (unsigned m = slow; m != 0; m &= m - 1) {
      const int i = __builtin_ctz(m);
      ys[i] = std::exp(xs[i]);
    }
    out = _mm512_load_ps(ys);
  }
  return out;
}

}  // namespace ts::ops::detail
