// AVX-512 kernels of the float weight types (F32, F16, BF16) and dequantization.
//
// Numerics as kernels_scalar.cc: one 16-lane fused multiply-add accumulator per (row,
// token), lane = column mod 16, tails loaded with zeros, then the pairwise lane sum.
// GCC 12's AVX-512 intrinsics build on self-initialized "undefined" vectors and warn
// about them at every inlined use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <type_traits>

#include "act.h"
#include "core/fp16.h"
#include "gemm_avx512.h"
#include "quant_blocks.h"

namespace ts::kernels::avx512 {
namespace {

#define TS_INLINE inline __attribute__((always_inline))
// Loops over registers (tokens, rows, words of a block) must be unrolled so that arrays of
// vectors stay in registers.
#define TS_UNROLL _Pragma("GCC unroll 16")

struct F32 {};
struct F16 {};
struct BF16 {};

// 16 values from p (elements of the type), the first `n` of them when masked.
template <typename W>
TS_INLINE __m512 load16(const void* p);
template <typename W>
TS_INLINE __m512 load16_masked(const void* p, __mmask16 m);

template <>
TS_INLINE __m512 load16<F32>(const void* p) {
  return _mm512_loadu_ps(p);
}
template <>
TS_INLINE __m512 load16_masked<F32>(const void* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
template <>
TS_INLINE __m512 load16<F16>(const void* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}
template <>
TS_INLINE __m512 load16_masked<F16>(const void* p, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}
template <>
TS_INLINE __m512 load16<BF16>(const void* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
template <>
TS_INLINE __m512 load16_masked<BF16>(const void* p, __mmask16 m) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

template <typename W>
constexpr int elem_bytes() {
  return std::is_same_v<W, F32> ? 4 : 2;
}

// Lanes i + 8, then i + 4, i + 2, i + 1: the canonical order.
TS_INLINE float reduce16(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

template <typename W>
float vec_dot(int64_t n, const void* w, const void* x) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* xp = static_cast<const uint8_t*>(x);
  constexpr int kB = elem_bytes<W>();
  __m512 acc = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) acc = _mm512_fmadd_ps(load16<W>(wp + k * kB), load16<W>(xp + k * kB), acc);
  if (k < n) {
    const __mmask16 m = __mmask16((1u << (n - k)) - 1);
    acc = _mm512_fmadd_ps(load16_masked<W>(wp + k * kB, m), load16_masked<W>(xp + k * kB, m), acc);
  }
  return reduce16(acc);
}

// R rows x T tokens; activations are float (already rounded to W's precision).
template <typename W, int R, int T>
void tile(const uint8_t* rows, int64_t rb, const Act& act, int t0, float* y, int64_t ys) {
  constexpr int kB = elem_bytes<W>();
  const int64_t n = act.n_cols;
  const float* x[T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) x[t] = act.at(act.xf, t0 + t);
  __m512 acc[R][T];
  TS_UNROLL
  for (int r = 0; r < R; ++r) TS_UNROLL
  for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 w[R];
    TS_UNROLL
    for (int r = 0; r < R; ++r) w[r] = load16<W>(rows + r * rb + k * kB);
    TS_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x[t] + k);
      TS_UNROLL
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  if (k < n) {
    const __mmask16 m = __mmask16((1u << (n - k)) - 1);
    __m512 w[R];
    TS_UNROLL
    for (int r = 0; r < R; ++r) w[r] = load16_masked<W>(rows + r * rb + k * kB, m);
    TS_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + k);
      TS_UNROLL
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  TS_UNROLL
  for (int t = 0; t < T; ++t) TS_UNROLL
  for (int r = 0; r < R; ++r) y[(t0 + t) * ys + r] = reduce16(acc[r][t]);
}

template <typename W, int R>
void rows_tile(const uint8_t* rows, int64_t rb, const Act& act, int t0, int nt, float* y, int64_t ys) {
  constexpr int kT = 4;
  int t = t0;
  for (; t + kT <= t0 + nt; t += kT) tile<W, R, kT>(rows, rb, act, t, y, ys);
  switch (t0 + nt - t) {
    case 3:
      tile<W, R, 3>(rows, rb, act, t, y, ys);
      break;
    case 2:
      tile<W, R, 2>(rows, rb, act, t, y, ys);
      break;
    case 1:
      tile<W, R, 1>(rows, rb, act, t, y, ys);
      break;
    default:
      break;
  }
}

template <typename W>
void gemm(const uint8_t* panel, int64_t rb, int n_rows, const Act& act, int t0, int nt, float* y,
          int64_t ys) {
  constexpr int kR = 4;
  int r = 0;
  for (; r + kR <= n_rows; r += kR) rows_tile<W, kR>(panel + r * rb, rb, act, t0, nt, y + r, ys);
  switch (n_rows - r) {
    case 3:
      rows_tile<W, 3>(panel + r * rb, rb, act, t0, nt, y + r, ys);
      break;
    case 2:
      rows_tile<W, 2>(panel + r * rb, rb, act, t0, nt, y + r, ys);
      break;
    case 1:
      rows_tile<W, 1>(panel + r * rb, rb, act, t0, nt, y + r, ys);
      break;
    default:
      break;
  }
}

// ---------------------------------------------------------------------------------------
// Dequantization (same single multiply per value as ref.cc).

template <typename W>
void to_float_plain(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  constexpr int kB = elem_bytes<W>();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) _mm512_storeu_ps(dst + k, load16<W>(p + k * kB));
  if (k < n) {
    const __mmask16 m = __mmask16((1u << (n - k)) - 1);
    _mm512_mask_storeu_ps(dst + k, m, load16_masked<W>(p + k * kB, m));
  }
}

void to_float_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const __m512 d = _mm512_set1_ps(fp16_to_f32(b[i].d));
    TS_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m512i q =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16 * h)));
      _mm512_storeu_ps(dst + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
    }
  }
}

void to_float_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  const __m512i eight = _mm512_set1_epi32(8), m4 = _mm512_set1_epi32(0xF);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const __m512 d = _mm512_set1_ps(fp16_to_f32(b[i].d));
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs)));
    const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(q, m4), eight);
    const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
    _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
  }
}

}  // namespace

PanelGemmFn float_gemm(DType t) {
  switch (t) {
    case DType::F32:
      return gemm<F32>;
    case DType::F16:
      return gemm<F16>;
    case DType::BF16:
      return gemm<BF16>;
    default:
      return nullptr;
  }
}

VecDotFn float_vec_dot(DType t) {
  switch (t) {
    case DType::F32:
      return vec_dot<F32>;
    case DType::F16:
      return vec_dot<F16>;
    case DType::BF16:
      return vec_dot<BF16>;
    default:
      return nullptr;
  }
}

ToFloatFn to_float(DType t) {
  switch (t) {
    case DType::F32:
      return to_float_plain<F32>;
    case DType::F16:
      return to_float_plain<F16>;
    case DType::BF16:
      return to_float_plain<BF16>;
    case DType::Q8_0:
      return to_float_q8_0;
    case DType::Q4_0:
      return to_float_q4_0;
    default:
      return nullptr;
  }
}

}  // namespace ts::kernels::avx512
