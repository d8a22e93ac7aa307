// AVX-512 activation converters: the same bytes as the scalar ones in act.cc (llama.cpp's
// reference rounding), computed 16 lanes at a time.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "act.h"
#include "core/fp16.h"
#include "quant_blocks.h"

namespace ts::kernels {
namespace {

// roundf(): round half away from zero, exactly (the fraction y - trunc(y) is exact).
inline __m512 round_half_away(__m512 y) {
  const __m512 t = _mm512_roundscale_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(y, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_or_ps(_mm512_and_ps(y, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
  return _mm512_mask_add_ps(t, up, t, one);
}

// One 32-block of activations as llama.cpp's x86 build quantizes them: d = amax / 127,
// q = round-half-to-even(x * (127 / amax)). (Its portable reference, used for weights,
// multiplies by 1 / d and rounds half away from zero; the two differ on rare values.)
// Returns sum(q); *d_out gets d (not rounded to fp16).
inline int q8_block32(const float* x, int8_t* qs, float* d_out) {
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float d = amax / 127.0f;
  const float id = amax != 0 ? 127.0f / amax : 0.0f;
  *d_out = d;
  const __m512 vid = _mm512_set1_ps(id);
  constexpr int kEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v0, vid), kEven));
  const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(v1, vid), kEven));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtepi32_epi8(q1));
  return _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
}

// Lane k: op over the 16 lanes of v[k] (op associative and commutative, so exact for max
// and integer sums in any order). A transposing tree: each level combines two registers'
// worth of halves, and leaves v[p] in lane 4 * (p % 4) + p / 4, undone by one permutation.
template <typename Op>
inline __m512 reduce16x16(const __m512* v, Op op) {
  __m512 t[8], u[4], w[2];
  for (int i = 0; i < 8; ++i)
    t[i] = op(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    u[i] = op(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88), _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    w[i] = op(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44), _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xEE));
  const __m512 f = op(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), f);
}

// 16 consecutive 32-blocks as q8_block32 quantizes each, their scales and sums a lane each,
// so the per-block reductions and divisions go 16 at a time: *d_full gets d (not rounded),
// the return value the sums of q.
inline __m512i q8_blocks16(const float* x, int8_t* qs, __m512* d_full) {
  __m512 m[16];
  for (int k = 0; k < 16; ++k)
    m[k] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 32 * k)), _mm512_abs_ps(_mm512_loadu_ps(x + 32 * k + 16)));
  const __m512 amax = reduce16x16(m, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); });
  *d_full = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
  const __mmask16 nonzero = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_NEQ_UQ);
  alignas(64) float id[16];
  _mm512_store_ps(id, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(127.0f), amax));
  constexpr int kEven = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  __m512 s[16];
  for (int k = 0; k < 16; ++k) {
    const __m512 vid = _mm512_set1_ps(id[k]);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * k), vid), kEven));
    const __m512i q1 =
        _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * k + 16), vid), kEven));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 32 * k), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 32 * k + 16), _mm512_cvtepi32_epi8(q1));
    s[k] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
  }
  return _mm512_castps_si512(reduce16x16(s, [](__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }));
}

inline __m512 round_f16_16(__m512 v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

void q8_0(const float* x, int64_t n, int offset, int8_t* qs, float* d, int32_t* corr) {
  int64_t i = 0;
  for (; i + 16 <= n / kQK; i += 16) {
    __m512 dfull;
    const __m512i sums = q8_blocks16(x + i * kQK, qs + i * kQK, &dfull);
    _mm512_storeu_ps(d + i, round_f16_16(dfull));
    _mm512_storeu_si512(corr + i, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-offset)));
  }
  for (; i < n / kQK; ++i) {
    float dfull;
    corr[i] = -offset * q8_block32(x + i * kQK, qs + i * kQK, &dfull);
    d[i] = fp16_to_f32(f32_to_fp16(dfull));
  }
}

void q8_1(const float* x, int64_t n, int8_t* qs, float* d, float* s) {
  int64_t i = 0;
  for (; i + 16 <= n / kQK; i += 16) {
    __m512 dfull;
    const __m512i sums = q8_blocks16(x + i * kQK, qs + i * kQK, &dfull);
    _mm512_storeu_ps(d + i, round_f16_16(dfull));
    // s uses the unrounded d
    _mm512_storeu_ps(s + i, round_f16_16(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), dfull)));
  }
  for (; i < n / kQK; ++i) {
    float dfull;
    const int sum = q8_block32(x + i * kQK, qs + i * kQK, &dfull);
    d[i] = fp16_to_f32(f32_to_fp16(dfull));
    s[i] = fp16_to_f32(f32_to_fp16(float(sum) * dfull));  // s uses the unrounded d
  }
}

void q8_k(const float* x, int64_t n, int8_t* qs, float* d, int32_t* corr16, int16_t* xs) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK, qs += kQKK) {
    __m512 v[16];
    __m512 m = _mm512_setzero_ps();
    for (int k = 0; k < 16; ++k) {
      v[k] = _mm512_loadu_ps(x + 16 * k);
      m = _mm512_max_ps(m, _mm512_abs_ps(v[k]));
    }
    const float amax = _mm512_reduce_max_ps(m);
    if (amax == 0) {  // as quantize_q8_k: an all-zero block stays zero
      d[i] = 0;
      for (int k = 0; k < 16; ++k)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * k), _mm_setzero_si128());
      for (int j = 0; j < 16; ++j) corr16[i * 16 + j] = 0;
      for (int j = 0; j < 8; ++j) xs[i * 8 + j] = 0;
      continue;
    }
    // The first element of largest magnitude decides the sign.
    float vmax = 0;
    for (int k = 0; k < 16; ++k) {
      const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(v[k]), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (eq) {
        vmax = x[16 * k + __builtin_ctz(eq)];
        break;
      }
    }
    const float iscale = -127.0f / vmax;
    const __m512 vis = _mm512_set1_ps(iscale);
    int bs[16];
    for (int k = 0; k < 16; ++k) {
      // nearest_int is round half to even: the default rounding of vcvtps2dq.
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[k], vis));
      q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16 * k), _mm512_cvtepi32_epi8(q));
      bs[k] = _mm512_reduce_add_epi32(q);
    }
    d[i] = 1.0f / iscale;
    for (int j = 0; j < 16; ++j) corr16[i * 16 + j] = -32 * bs[j];
    for (int j = 0; j < 8; ++j) xs[i * 8 + j] = int16_t(bs[2 * j] + bs[2 * j + 1]);
  }
}

void round_f16(const float* x, int64_t n, float* out) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(x + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(out + k, _mm512_cvtph_ps(h));
  }
  for (; k < n; ++k) out[k] = fp16_to_f32(f32_to_fp16(x[k]));
}

void round_bf16(const float* x, int64_t n, float* out) {
  int64_t k = 0;
  const __m512i lsb = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i hi_mask = _mm512_set1_epi32(int32_t(0xFFFF0000u)), quiet = _mm512_set1_epi32(0x00400000);
  for (; k + 16 <= n; k += 16) {
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + k));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i r =
        _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), lsb)));
    __m512i o = _mm512_and_si512(r, hi_mask);
    o = _mm512_mask_mov_epi32(o, nan, _mm512_and_si512(_mm512_or_si512(u, quiet), hi_mask));
    _mm512_storeu_ps(out + k, _mm512_castsi512_ps(o));
  }
  for (; k < n; ++k) out[k] = bf16_to_f32(f32_to_bf16(x[k]));
}

}  // namespace

const ActRowFns* act_row_fns_avx512() {
  static const ActRowFns f = {q8_0, q8_1, q8_k, round_f16, round_bf16};
  return &f;
}

}  // namespace ts::kernels
