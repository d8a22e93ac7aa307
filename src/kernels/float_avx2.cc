// AVX2 kernels of the float weight types (F32, F16, BF16) and dequantization.
//
// Numerics as kernels_scalar.cc: 16 lanes (two 8-lane registers) of fused multiply-adds
// per (row, token), lane = column mod 16, then the pairwise lane sum.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "act.h"
#include "core/fp16.h"
#include "gemm_avx2.h"
#include "quant_blocks.h"

namespace ts::kernels::avx2 {
namespace {

#define TS_INLINE inline __attribute__((always_inline))
#define TS_UNROLL _Pragma("GCC unroll 16")

struct F32 {};
struct F16 {};
struct BF16 {};

template <typename W>
constexpr int elem_bytes() {
  return std::is_same_v<W, F32> ? 4 : 2;
}

template <typename W>
TS_INLINE __m256 load8(const uint8_t* p) {
  if constexpr (std::is_same_v<W, F32>) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (std::is_same_v<W, F16>) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  } else {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}

// Lanes i + 8 (the two registers), then i + 4, i + 2, i + 1.
TS_INLINE float reduce16(__m256 lo, __m256 hi) {
  const __m256 a = _mm256_add_ps(lo, hi);
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

// The last n % 16 elements, zero-padded to 16 (the scalar kernel adds nothing for them,
// and fma(0, 0, acc) == acc).
template <typename W>
struct Tail {
  alignas(32) uint8_t bytes[16 * 4] = {};
  Tail(const uint8_t* p, int64_t rem) { std::memcpy(bytes, p, size_t(rem) * elem_bytes<W>()); }
};

template <typename W>
float vec_dot(int64_t n, const void* w, const void* x) {
  const auto* wp = static_cast<const uint8_t*>(w);
  const auto* xp = static_cast<const uint8_t*>(x);
  constexpr int kB = elem_bytes<W>();
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    a0 = _mm256_fmadd_ps(load8<W>(wp + k * kB), load8<W>(xp + k * kB), a0);
    a1 = _mm256_fmadd_ps(load8<W>(wp + (k + 8) * kB), load8<W>(xp + (k + 8) * kB), a1);
  }
  if (k < n) {
    const Tail<W> tw(wp + k * kB, n - k), tx(xp + k * kB, n - k);
    a0 = _mm256_fmadd_ps(load8<W>(tw.bytes), load8<W>(tx.bytes), a0);
    a1 = _mm256_fmadd_ps(load8<W>(tw.bytes + 8 * kB), load8<W>(tx.bytes + 8 * kB), a1);
  }
  return reduce16(a0, a1);
}

template <typename W, int R, int T>
void tile(const uint8_t* rows, int64_t rb, const Act& act, int t0, float* y, int64_t ys) {
  constexpr int kB = elem_bytes<W>();
  const int64_t n = act.n_cols;
  const float* x[T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) x[t] = act.at(act.xf, t0 + t);
  __m256 acc[R][T][2];
  TS_UNROLL
  for (int r = 0; r < R; ++r) TS_UNROLL
  for (int t = 0; t < T; ++t) acc[r][t][0] = acc[r][t][1] = _mm256_setzero_ps();
  auto step = [&](const uint8_t* const* wp, const float* const* xp) __attribute__((always_inline)) {
    TS_UNROLL
    for (int h = 0; h < 2; ++h) {
      __m256 w[R];
      TS_UNROLL
      for (int r = 0; r < R; ++r) w[r] = load8<W>(wp[r] + 8 * h * kB);
      TS_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_loadu_ps(xp[t] + 8 * h);
        TS_UNROLL
        for (int r = 0; r < R; ++r) acc[r][t][h] = _mm256_fmadd_ps(w[r], xv, acc[r][t][h]);
      }
    }
  };
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const uint8_t* wp[R];
    const float* xp[T];
    TS_UNROLL
    for (int r = 0; r < R; ++r) wp[r] = rows + r * rb + k * kB;
    TS_UNROLL
    for (int t = 0; t < T; ++t) xp[t] = x[t] + k;
    step(wp, xp);
  }
  if (k < n) {
    alignas(32) uint8_t wt[R][16 * 4] = {};
    alignas(32) float xt[T][16] = {};
    const uint8_t* wp[R];
    const float* xp[T];
    for (int r = 0; r < R; ++r) {
      std::memcpy(wt[r], rows + r * rb + k * kB, size_t(n - k) * kB);
      wp[r] = wt[r];
    }
    for (int t = 0; t < T; ++t) {
      std::memcpy(xt[t], x[t] + k, size_t(n - k) * 4);
      xp[t] = xt[t];
    }
    step(wp, xp);
  }
  TS_UNROLL
  for (int t = 0; t < T; ++t) TS_UNROLL
  for (int r = 0; r < R; ++r) y[(t0 + t) * ys + r] = reduce16(acc[r][t][0], acc[r][t][1]);
}

template <typename W, int R>
void rows_tile(const uint8_t* rows, int64_t rb, const Act& act, int t0, int nt, float* y, int64_t ys) {
  int t = t0;
  for (; t + 2 <= t0 + nt; t += 2) tile<W, R, 2>(rows, rb, act, t, y, ys);
  if (t < t0 + nt) tile<W, R, 1>(rows, rb, act, t, y, ys);
}

template <typename W>
void gemm(const uint8_t* panel, int64_t rb, int n_rows, const Act& act, int t0, int nt, float* y,
          int64_t ys) {
  int r = 0;
  for (; r + 2 <= n_rows; r += 2) rows_tile<W, 2>(panel + r * rb, rb, act, t0, nt, y + r, ys);
  if (r < n_rows) rows_tile<W, 1>(panel + r * rb, rb, act, t0, nt, y + r, ys);
}

template <typename W>
void to_float_plain(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  constexpr int kB = elem_bytes<W>();
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, load8<W>(p + k * kB));
  for (; k < n; ++k) {
    if constexpr (std::is_same_v<W, F32>) {
      std::memcpy(dst + k, p + 4 * k, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * k, 2);
      dst[k] = std::is_same_v<W, F16> ? fp16_to_f32(h) : bf16_to_f32(h);
    }
  }
}

void to_float_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const __m256 d = _mm256_set1_ps(fp16_to_f32(b[i].d));
    for (int h = 0; h < 4; ++h) {
      const __m256i q =
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + 8 * h)));
      _mm256_storeu_ps(dst + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
    }
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
    default:
      return nullptr;
  }
}

}  // namespace ts::kernels::avx2
