// The exponentials of a sampling softmax, 16 at a time: a float exp (not libm's bits:
// sampling needs the distribution, and no logit comparison depends on these values) and
// the sums in double, per block for the draw. See ops::exp_shifted.
// GCC 12 warns about the unused pass-through operand of masked AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "ops_internal.h"

namespace ts::ops::detail {
namespace {

// e^t for t in [-104, 88] (clamped; NaN gives e^-104): t = n ln2 + r, |r| <= ln2/2, with
// ln2 in two parts so that n * hi is exact; e^r by its Taylor series to degree 7 (relative
// error < 2e-9, below float's 6e-8); times 2^n by scalef, which rounds into the subnormal
// range and to 0 as e^t does.
inline __m512 exp_fast16(__m512 t) {
  t = _mm512_min_ps(_mm512_max_ps(t, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), t);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace

double exp_shifted_avx512(const float* x, int64_t n, float shift, float scale, float cut, float* y, int64_t block,
                          double* block_sums) {
  const __m512 vs = _mm512_set1_ps(shift), vk = _mm512_set1_ps(scale), vc = _mm512_set1_ps(cut);
  double total = 0.0;
  const int64_t bl = block_sums ? block : n;
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += bl, ++bi) {
    const int64_t b1 = std::min(n, b0 + bl);
    __m512d s0 = _mm512_setzero_pd(), s1 = s0;
    for (int64_t i = b0; i < b1; i += 16) {
      const __mmask16 in = b1 - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (b1 - i)) - 1);
      const __m512 xv = _mm512_maskz_loadu_ps(in, x + i);
      const __mmask16 keep = in & _mm512_cmp_ps_mask(xv, vc, _CMP_GE_OQ);
      const __m512 e = _mm512_maskz_mov_ps(keep, exp_fast16(_mm512_mul_ps(_mm512_sub_ps(xv, vs), vk)));
      if (y) _mm512_mask_storeu_ps(y + i, in, e);
      s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
      s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    const double s = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    if (block_sums) block_sums[bi] = s;
    total += s;
  }
  return total;
}

}  // namespace ts::ops::detail
