// AVX2 activation converters: the same bytes as the scalar ones in act.cc (llama.cpp's
// reference rounding), 8 lanes at a time.
#include <immintrin.h>

#include "act.h"
#include "core/fp16.h"
#include "quant_blocks.h"

namespace ts::kernels {
namespace {

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline int hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline __m256 vabs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// roundf(): round half away from zero, exactly (the fraction y - trunc(y) is exact).
inline __m256 round_half_away(__m256 y) {
  const __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(vabs(_mm256_sub_ps(y, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(y, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// 8 int32 levels in -127..127 to 8 bytes.
inline void store8(int8_t* dst, __m256i q) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packs_epi16(w, w));
}

// One 32-block of activations as llama.cpp's x86 build quantizes them (see act_avx512.cc):
// q = round-half-to-even(x * (127 / amax)). Returns sum(q); *d_out gets the unrounded d.
inline int q8_block32(const float* x, int8_t* qs, float* d_out) {
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    m = _mm256_max_ps(m, vabs(v[k]));
  }
  const float amax = hmax(m);
  const float d = amax / 127.0f;
  const float id = amax != 0 ? 127.0f / amax : 0.0f;
  *d_out = d;
  const __m256 vid = _mm256_set1_ps(id);
  __m256i sum = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    const __m256i q = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v[k], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    store8(qs + 8 * k, q);
    sum = _mm256_add_epi32(sum, q);
  }
  return hsum(sum);
}

void q8_0(const float* x, int64_t n, int offset, int8_t* qs, float* d, int32_t* corr) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    float dfull;
    corr[i] = -offset * q8_block32(x + i * kQK, qs + i * kQK, &dfull);
    d[i] = fp16_to_f32(f32_to_fp16(dfull));
  }
}

void q8_1(const float* x, int64_t n, int8_t* qs, float* d, float* s) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    float dfull;
    const int sum = q8_block32(x + i * kQK, qs + i * kQK, &dfull);
    d[i] = fp16_to_f32(f32_to_fp16(dfull));
    s[i] = fp16_to_f32(f32_to_fp16(float(sum) * dfull));  // s uses the unrounded d
  }
}

void q8_k(const float* x, int64_t n, int8_t* qs, float* d, int32_t* corr16, int16_t* xs) {
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK, qs += kQKK) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 32; ++k) m = _mm256_max_ps(m, vabs(_mm256_loadu_ps(x + 8 * k)));
    const float amax = hmax(m);
    if (amax == 0) {  // as quantize_q8_k: an all-zero block stays zero
      d[i] = 0;
      for (int k = 0; k < kQKK; ++k) qs[k] = 0;
      for (int j = 0; j < 16; ++j) corr16[i * 16 + j] = 0;
      for (int j = 0; j < 8; ++j) xs[i * 8 + j] = 0;
      continue;
    }
    float vmax = 0;  // the first element of largest magnitude decides the sign
    for (int k = 0; k < kQKK; ++k) {
      if (x[k] == amax || x[k] == -amax) {
        vmax = x[k];
        break;
      }
    }
    const float iscale = -127.0f / vmax;
    const __m256 vis = _mm256_set1_ps(iscale);
    int bs[16];
    for (int j = 0; j < 16; ++j) {
      __m256i sum = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        // nearest_int is round half to even: the default rounding of vcvtps2dq.
        __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * j + 8 * h), vis));
        q = _mm256_min_epi32(q, _mm256_set1_epi32(127));
        store8(qs + 16 * j + 8 * h, q);
        sum = _mm256_add_epi32(sum, q);
      }
      bs[j] = hsum(sum);
    }
    d[i] = 1.0f / iscale;
    for (int j = 0; j < 16; ++j) corr16[i * 16 + j] = -32 * bs[j];
    for (int j = 0; j < 8; ++j) xs[i * 8 + j] = int16_t(bs[2 * j] + bs[2 * j + 1]);
  }
}

void round_f16(const float* x, int64_t n, float* out) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out + k, _mm256_cvtph_ps(h));
  }
  for (; k < n; ++k) out[k] = fp16_to_f32(f32_to_fp16(x[k]));
}

void round_bf16(const float* x, int64_t n, float* out) {
  int64_t k = 0;
  const __m256i lsb = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF);
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
  const __m256i hi_mask = _mm256_set1_epi32(int32_t(0xFFFF0000u)), quiet = _mm256_set1_epi32(0x00400000);
  for (; k + 8 <= n; k += 8) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + k));
    // Both sides are non-negative as int32, so the signed compare finds the NaNs.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    const __m256i r =
        _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb)));
    const __m256i o = _mm256_blendv_epi8(_mm256_and_si256(r, hi_mask),
                                         _mm256_and_si256(_mm256_or_si256(u, quiet), hi_mask), nan);
    _mm256_storeu_ps(out + k, _mm256_castsi256_ps(o));
  }
  for (; k < n; ++k) out[k] = bf16_to_f32(f32_to_bf16(x[k]));
}

}  // namespace

const ActRowFns* act_row_fns_avx2() {
  static const ActRowFns f = {q8_0, q8_1, q8_k, round_f16, round_bf16};
  return &f;
}

}  // namespace ts::kernels
