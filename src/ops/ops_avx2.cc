// AVX2 + F16C versions of the attention inner loops (called only when the CPU has them).
//
// Scalar tails must round exactly like the scalar reference, so the compiler may not fuse
// their multiplies and adds (GCC does so by default in C++ once FMA is enabled).
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "ops/ops.h"
#include "ops_internal.h"

namespace ts::ops::detail {
namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline __m256 load_h(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// Converted into a register, then stored: the empty asm keeps GCC from folding the two into
// vcvtps2ph's memory form, which is slower on Zen 4 (attn_bench f16_update/ymm vs ymm_reg).
inline void store_h(uint16_t* p, __m256 v) {
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  asm("" : "+x"(h));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f2h(float f) { return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

// Sum of k[d] * q[d] over [d0, d1) in double. Each product of two halves is exact in
// float, so any summation order in double rounds to the same float as a sequential one.
inline double dot_tail(const uint16_t* k, const uint16_t* q, int d0, int d1) {
  double sum = 0.0;
  int d = d0;
  if (d + 8 <= d1) {
    __m256d a = _mm256_setzero_pd();
    for (; d + 8 <= d1; d += 8) {
      const __m256 p = _mm256_mul_ps(load_h(k + d), load_h(q + d));
      a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
      a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
    }
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  }
  for (; d < d1; ++d) sum += double(h2f(k[d]) * h2f(q[d]));
  return sum;
}

// dot_tail on values already converted to float (same products, same order).
inline double dot_tail_f(const float* k, const float* q, int d0, int d1) {
  double sum = 0.0;
  int d = d0;
  if (d + 8 <= d1) {
    __m256d a = _mm256_setzero_pd();
    for (; d + 8 <= d1; d += 8) {
      const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(k + d), _mm256_loadu_ps(q + d));
      a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
      a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
    }
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    sum = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
  }
  for (; d < d1; ++d) sum += double(k[d] * q[d]);
  return sum;
}

// acc[d] = f16(acc[d] + v[d] * s) over [d0, d1), multiply and add rounded separately.
inline void mad_tail(uint16_t* acc, const uint16_t* v, float s, int d0, int d1) {
  int d = d0;
  const __m256 vs = _mm256_set1_ps(s);
  for (; d + 8 <= d1; d += 8) store_h(acc + d, _mm256_add_ps(load_h(acc + d), _mm256_mul_ps(load_h(v + d), vs)));
  for (; d < d1; ++d) acc[d] = f2h(h2f(acc[d]) + h2f(v[d]) * s);
}

// acc[d] = f16(acc[d] * s) over [0, n).
inline void scale_h(uint16_t* acc, float s, int n) {
  int d = 0;
  const __m256 vs = _mm256_set1_ps(s);
  for (; d + 8 <= n; d += 8) store_h(acc + d, _mm256_mul_ps(load_h(acc + d), vs));
  for (; d < n; ++d) acc[d] = f2h(h2f(acc[d]) * s);
}

}  // namespace

void to_f16_avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store_h(y + i, _mm256_loadu_ps(x + i));
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

void attention_head_avx2(const float* q, const KvCache& kv, int layer, int kv_head,
                         const KvSeqView& seq, int64_t n_kv, float scale, float* out,
                         uint16_t* scratch) {
  // Mirrors the structure of llama.cpp's AVX2 flash attention so that rounding agrees:
  // dot products and value updates run 32 elements at a time (4 vectors of 8), and the
  // tail of a row (all of it for heads under 32 dims) in scalar code, the dot summed in
  // double, without fused multiply-adds.
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  const int dk32 = dk & ~31, dv32 = dv & ~31;
  uint16_t* q16 = scratch;
  uint16_t* acc = scratch + dk;
  to_f16_avx2(q, q16, dk);
  std::memset(acc, 0, size_t(dv) * sizeof(uint16_t));
  float m = -std::numeric_limits<float>::infinity();
  float s_sum = 0.0f;
  const int64_t ks = kv.k_cell_stride(), vs_stride = kv.v_cell_stride();
  const uint16_t* k_base = kv.k(layer, 0) + int64_t(kv_head) * dk;
  const uint16_t* v_base = kv.v(layer, 0) + int64_t(kv_head) * dv;
  for (int64_t p0 = 0; p0 < n_kv; p0 += seq.block_size) {
    const int64_t cell0 = int64_t(seq.blocks[size_t(p0 / seq.block_size)]) * seq.block_size;
    const int64_t n_in = std::min<int64_t>(seq.block_size, n_kv - p0);
    for (int64_t j = 0; j < n_in; ++j) {
      const uint16_t* k = k_base + (cell0 + j) * ks;
      const uint16_t* v = v_base + (cell0 + j) * vs_stride;
      double dot = 0.0;
      if (dk32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < dk32; d += 32) {
          a0 = _mm256_fmadd_ps(load_h(k + d), load_h(q16 + d), a0);
          a1 = _mm256_fmadd_ps(load_h(k + d + 8), load_h(q16 + d + 8), a1);
          a2 = _mm256_fmadd_ps(load_h(k + d + 16), load_h(q16 + d + 16), a2);
          a3 = _mm256_fmadd_ps(load_h(k + d + 24), load_h(q16 + d + 24), a3);
        }
        dot = double(hsum(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3))));
      }
      if (dk32 < dk) dot += dot_tail(k, q16, dk32, dk);
      const float s = float(dot) * scale;
      float ms = 1.0f, vsc = 1.0f;
      if (s > m) {
        ms = std::exp(m - s);
        m = s;
        scale_h(acc, ms, dv);
      } else {
        vsc = std::exp(s - m);
      }
      const __m256 vv = _mm256_set1_ps(vsc);
      for (int d = 0; d < dv32; d += 8) store_h(acc + d, _mm256_fmadd_ps(load_h(v + d), vv, load_h(acc + d)));
      if (dv32 < dv) mad_tail(acc, v, vsc, dv32, dv);
      s_sum = s_sum * ms + vsc;
    }
  }
  const float inv = s_sum == 0.0f ? 0.0f : 1.0f / s_sum;
  const int dv8 = dv & ~7;
  const __m256 vinv = _mm256_set1_ps(inv);
  for (int d = 0; d < dv8; d += 8) _mm256_storeu_ps(out + d, _mm256_mul_ps(load_h(acc + d), vinv));
  for (int d = dv8; d < dv; ++d) out[d] = h2f(acc[d]) * inv;
}

void attention_group_avx2(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                          int kv_head, const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                          const int64_t* kv_begin) {
  // Per query, exactly the operations of attention_head_avx2 in the same order; only the
  // schedule differs. Products of two halves are exact in float, so converting each K and V
  // row once (for all queries) and multiplying floats gives the same values.
  //
  // The online softmax is a chain per query through the running max and the F16
  // accumulator, one link per key. Keys go in chunks of kChunk: first each query's scores
  // of the chunk and its softmax factors (the dot products and exp calls of different keys
  // are independent once the running max is known, which is a cheap scalar walk), then the
  // accumulator updates key by key, query by query — so that the exp latency is off the
  // accumulator's chain and the chains of several queries overlap. Walking one key at a
  // time instead (dot, exp, update) ran 110m's decode attention at ~1/3 of the AVX-512 rate.
  constexpr int kChunk = kAvx2AttnChunk;
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  const int dk32 = dk & ~31, dv32 = dv & ~31;
  const int dkp = (dk + 7) & ~7;  // a K row's floats in the chunk, 32-byte aligned rows
  // Scratch: acc[n_q][dv] halves, then floats: qf[n_q][dk], kf[kChunk][dkp], vf[dv] (aligned).
  uint16_t* acc = scratch;
  uintptr_t fp = reinterpret_cast<uintptr_t>(scratch + n_q * dv);
  fp = (fp + 31) & ~uintptr_t(31);
  float* qf = reinterpret_cast<float*>(fp);
  float* kf = qf + ((n_q * dk + 7) & ~7);
  float* vf = kf + kChunk * dkp;
  float m[ops::kMaxGroupQueries], s_sum[ops::kMaxGroupQueries];
  // Per query and key of a chunk: the factor of the key's value row (1 for a new maximum)
  // and of the accumulator (1 unless a new maximum); what: 0 not attended, 1 attended,
  // 2 attended as a new maximum (the accumulator is rescaled first).
  float vfac[ops::kMaxGroupQueries][kChunk], afac[ops::kMaxGroupQueries][kChunk];
  uint8_t what[ops::kMaxGroupQueries][kChunk];
  int64_t max_kv = 0;
  for (int i = 0; i < n_q; ++i) {
    for (int d = 0; d < dk; ++d) qf[i * dk + d] = h2f(f2h(q[i][d]));
    std::memset(acc + i * dv, 0, size_t(dv) * sizeof(uint16_t));
    m[i] = -std::numeric_limits<float>::infinity();
    s_sum[i] = 0.0f;
    max_kv = std::max(max_kv, n_kv[i]);
  }
  const int64_t ks = kv.k_cell_stride(), vs_stride = kv.v_cell_stride();
  const uint16_t* k_base = kv.k(layer, 0) + int64_t(kv_head) * dk;
  const uint16_t* v_base = kv.v(layer, 0) + int64_t(kv_head) * dv;
  for (int64_t p0 = 0; p0 < max_kv; p0 += seq.block_size) {
    const int64_t cell0 = int64_t(seq.blocks[size_t(p0 / seq.block_size)]) * seq.block_size;
    const int64_t n_in = std::min<int64_t>(seq.block_size, max_kv - p0);
    for (int64_t j0 = 0; j0 < n_in; j0 += kChunk) {
      const int nc = int(std::min<int64_t>(kChunk, n_in - j0));
      for (int c = 0; c < nc; ++c) {
        const uint16_t* k = k_base + (cell0 + j0 + c) * ks;
        float* kc = kf + c * dkp;
        int d = 0;
        for (; d + 8 <= dk; d += 8) _mm256_storeu_ps(kc + d, load_h(k + d));
        for (; d < dk; ++d) kc[d] = h2f(k[d]);
      }
      // Scores and factors, query by query.
      for (int i = 0; i < n_q; ++i) {
        const float* qi = qf + i * dk;
        for (int c = 0; c < nc; ++c) {
          const int64_t p = p0 + j0 + c;
          if (p >= n_kv[i] || (kv_begin && p < kv_begin[i])) {
            what[i][c] = 0;
            continue;
          }
          const float* kc = kf + c * dkp;
          double dot = 0.0;
          if (dk32) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int e = 0; e < dk32; e += 32) {
              a0 = _mm256_fmadd_ps(_mm256_loadu_ps(kc + e), _mm256_loadu_ps(qi + e), a0);
              a1 = _mm256_fmadd_ps(_mm256_loadu_ps(kc + e + 8), _mm256_loadu_ps(qi + e + 8), a1);
              a2 = _mm256_fmadd_ps(_mm256_loadu_ps(kc + e + 16), _mm256_loadu_ps(qi + e + 16), a2);
              a3 = _mm256_fmadd_ps(_mm256_loadu_ps(kc + e + 24), _mm256_loadu_ps(qi + e + 24), a3);
            }
            dot = double(hsum(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3))));
          }
          if (dk32 < dk) dot += dot_tail_f(kc, qi, dk32, dk);
          const float s = float(dot) * scale;
          if (s > m[i]) {
            afac[i][c] = std::exp(m[i] - s);
            vfac[i][c] = 1.0f;
            what[i][c] = 2;
            m[i] = s;
          } else {
            afac[i][c] = 1.0f;
            vfac[i][c] = std::exp(s - m[i]);
            what[i][c] = 1;
          }
        }
      }
      // Accumulator updates, key by key.
      for (int c = 0; c < nc; ++c) {
        const uint16_t* v = v_base + (cell0 + j0 + c) * vs_stride;
        int d = 0;
        for (; d + 8 <= dv; d += 8) _mm256_storeu_ps(vf + d, load_h(v + d));
        for (; d < dv; ++d) vf[d] = h2f(v[d]);
        for (int i = 0; i < n_q; ++i) {
          if (what[i][c] == 0) continue;
          uint16_t* ai = acc + i * dv;
          const float ms = afac[i][c], vsc = vfac[i][c];
          if (what[i][c] == 2) scale_h(ai, ms, dv);
          const __m256 vv = _mm256_set1_ps(vsc);
          int e = 0;
          for (; e < dv32; e += 8) store_h(ai + e, _mm256_fmadd_ps(_mm256_loadu_ps(vf + e), vv, load_h(ai + e)));
          for (; e + 8 <= dv; e += 8)
            store_h(ai + e, _mm256_add_ps(load_h(ai + e), _mm256_mul_ps(_mm256_loadu_ps(vf + e), vv)));
          for (; e < dv; ++e) ai[e] = f2h(h2f(ai[e]) + vf[e] * vsc);
          s_sum[i] = s_sum[i] * ms + vsc;
        }
      }
    }
  }
  const int dv8 = dv & ~7;
  for (int i = 0; i < n_q; ++i) {
    const float inv = s_sum[i] == 0.0f ? 0.0f : 1.0f / s_sum[i];
    const __m256 vinv = _mm256_set1_ps(inv);
    const uint16_t* ai = acc + i * dv;
    for (int d = 0; d < dv8; d += 8) _mm256_storeu_ps(out[i] + d, _mm256_mul_ps(load_h(ai + d), vinv));
    for (int d = dv8; d < dv; ++d) out[i][d] = h2f(ai[d]) * inv;
  }
}

bool attention_seq_avx2(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                        float scale) {
  // Every query gets exactly attention_head_avx2's operations in its order (the same dot
  // products from the F16 rows, factors, F16 accumulator updates); the schedule is that of
  // attention_group_avx2 over the queries of all heads: per chunk of keys each query's
  // scores and factors, then the updates key by key, query by query, so that the
  // accumulator chains of all heads overlap (one kv head per query in llama 110m's decode,
  // where a walk per head leaves one chain at a time).
  constexpr int kChunk = kAvx2AttnChunk;
  constexpr int kMaxDim = 256;
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  if (n_q < 1 || n_q > kMaxSeqQueries || dk > kMaxDim || dv > kMaxDim) return false;
  const int dk32 = dk & ~31, dv32 = dv & ~31;
  alignas(32) uint16_t q16[kMaxSeqQueries][kMaxDim];
  alignas(32) uint16_t acc[kMaxSeqQueries][kMaxDim];
  float m[kMaxSeqQueries], s_sum[kMaxSeqQueries];
  float vfac[kMaxSeqQueries][kChunk], afac[kMaxSeqQueries][kChunk];
  uint8_t what[kMaxSeqQueries][kChunk];  // as in attention_group_avx2
  int64_t max_kv = 0;
  for (int i = 0; i < n_q; ++i) {
    to_f16_avx2(qs[i].q, q16[i], dk);
    std::memset(acc[i], 0, size_t(dv) * sizeof(uint16_t));
    m[i] = -std::numeric_limits<float>::infinity();
    s_sum[i] = 0.0f;
    max_kv = std::max(max_kv, qs[i].n_kv);
  }
  const int64_t ks = kv.k_cell_stride(), vs_stride = kv.v_cell_stride();
  const uint16_t* k_base = kv.k(layer, 0);
  const uint16_t* v_base = kv.v(layer, 0);
  for (int64_t p0 = 0; p0 < max_kv; p0 += seq.block_size) {
    const int64_t cell0 = int64_t(seq.blocks[size_t(p0 / seq.block_size)]) * seq.block_size;
    const int64_t n_in = std::min<int64_t>(seq.block_size, max_kv - p0);
    for (int64_t j0 = 0; j0 < n_in; j0 += kChunk) {
      const int nc = int(std::min<int64_t>(kChunk, n_in - j0));
      for (int i = 0; i < n_q; ++i) {
        const uint16_t* qi = q16[i];
        const uint16_t* kh = k_base + (cell0 + j0) * ks + int64_t(qs[i].kv_head) * dk;
        for (int c = 0; c < nc; ++c) {
          if (p0 + j0 + c >= qs[i].n_kv) {
            what[i][c] = 0;
            continue;
          }
          const uint16_t* k = kh + c * ks;
          double dot = 0.0;
          if (dk32) {
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int d = 0; d < dk32; d += 32) {
              a0 = _mm256_fmadd_ps(load_h(k + d), load_h(qi + d), a0);
              a1 = _mm256_fmadd_ps(load_h(k + d + 8), load_h(qi + d + 8), a1);
              a2 = _mm256_fmadd_ps(load_h(k + d + 16), load_h(qi + d + 16), a2);
              a3 = _mm256_fmadd_ps(load_h(k + d + 24), load_h(qi + d + 24), a3);
            }
            dot = double(hsum(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3))));
          }
          if (dk32 < dk) dot += dot_tail(k, qi, dk32, dk);
          const float s = float(dot) * scale;
          if (s > m[i]) {
            afac[i][c] = std::exp(m[i] - s);
            vfac[i][c] = 1.0f;
            what[i][c] = 2;
            m[i] = s;
          } else {
            afac[i][c] = 1.0f;
            vfac[i][c] = std::exp(s - m[i]);
            what[i][c] = 1;
          }
        }
      }
      for (int c = 0; c < nc; ++c) {
        const uint16_t* vc = v_base + (cell0 + j0 + c) * vs_stride;
        for (int i = 0; i < n_q; ++i) {
          if (what[i][c] == 0) continue;
          uint16_t* ai = acc[i];
          const uint16_t* v = vc + int64_t(qs[i].kv_head) * dv;
          const float ms = afac[i][c], vsc = vfac[i][c];
          if (what[i][c] == 2) scale_h(ai, ms, dv);
          const __m256 vv = _mm256_set1_ps(vsc);
          for (int d = 0; d < dv32; d += 8) store_h(ai + d, _mm256_fmadd_ps(load_h(v + d), vv, load_h(ai + d)));
          if (dv32 < dv) mad_tail(ai, v, vsc, dv32, dv);
          s_sum[i] = s_sum[i] * ms + vsc;
        }
      }
    }
  }
  const int dv8 = dv & ~7;
  for (int i = 0; i < n_q; ++i) {
    const float inv = s_sum[i] == 0.0f ? 0.0f : 1.0f / s_sum[i];
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int d = 0; d < dv8; d += 8) _mm256_storeu_ps(qs[i].out + d, _mm256_mul_ps(load_h(acc[i] + d), vinv));
    for (int d = dv8; d < dv; ++d) qs[i].out[d] = h2f(acc[i][d]) * inv;
  }
  return true;
}

}  // namespace ts::ops::detail

namespace ts::ops::detail {

// Per row, sum[k] += double(x * x) over i = 0..n-1 in order, as rms_norm's loop adds: 8
// rows at a time, the squares of an 8x8 tile transposed so that one register holds element
// i of rows 0-3 (and one of rows 4-7), whose 4 double sums then advance together.
void sum_squares8_avx2(const float* x, int64_t stride, int64_t n, double* sum) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 r[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      r[k] = _mm256_loadu_ps(x + k * stride + i);
      r[k] = _mm256_mul_ps(r[k], r[k]);
    }
    __m256 t[8], s[8];
#pragma GCC unroll 4
    for (int k = 0; k < 8; k += 2) {
      t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
      t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
#pragma GCC unroll 2
    for (int k = 0; k < 8; k += 4) {
      s[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
      s[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);
      s[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
      s[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    // Column j: element i + j of rows 0..7.
    __m256 c[8];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      c[j] = _mm256_permute2f128_ps(s[j], s[j + 4], 0x20);
      c[j + 4] = _mm256_permute2f128_ps(s[j], s[j + 4], 0x31);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(c[j])));
      hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(c[j], 1)));
    }
  }
  _mm256_storeu_pd(sum, lo);
  _mm256_storeu_pd(sum + 4, hi);
  for (; i < n; ++i)
    for (int k = 0; k < 8; ++k) {
      const float v = x[k * stride + i];
      sum[k] += double(v * v);
    }
}

}  // namespace ts::ops::detail
