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
#include "f16_avx2.h"
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

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t f2h(float f) { return uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

// Eight elements of a row as floats: F16 rows converted, float rows (rows converted once
// and shared by several queries) loaded. Products of two halves are exact in float, so
// both give the same products.
inline __m256 load8(const uint16_t* p) { return load_h8(p); }
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline float value(uint16_t h) { return h2f(h); }
inline float value(float f) { return f; }

// The score of one key, as llama.cpp's AVX2 flash attention computes it: dims 32 at a time in
// four 8-lane FMA sums, then the tail (all of it for heads under 32 dims) in double. Each
// product is exact in float, so any summation order in double rounds to the same float as a
// sequential one.
template <class Row>
inline float score(const Row* k, const Row* q, int dk, float scale) {
  const int dk32 = dk & ~31;
  double dot = 0.0;
  if (dk32) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int d = 0; d < dk32; d += 32) {
      a0 = _mm256_fmadd_ps(load8(k + d), load8(q + d), a0);
      a1 = _mm256_fmadd_ps(load8(k + d + 8), load8(q + d + 8), a1);
      a2 = _mm256_fmadd_ps(load8(k + d + 16), load8(q + d + 16), a2);
      a3 = _mm256_fmadd_ps(load8(k + d + 24), load8(q + d + 24), a3);
    }
    dot = double(hsum(_mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3))));
  }
  int d = dk32;
  if (d < dk) {
    double tail = 0.0;
    if (d + 8 <= dk) {
      __m256d a = _mm256_setzero_pd();
      for (; d + 8 <= dk; d += 8) {
        const __m256 p = _mm256_mul_ps(load8(k + d), load8(q + d));
        a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(p)));
        a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1)));
      }
      __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
      tail = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    }
    for (; d < dk; ++d) tail += double(value(k[d]) * value(q[d]));
    dot += tail;
  }
  return float(dot) * scale;
}

// One key's online-softmax step for a query whose running maximum is m: 2 when s is a new
// maximum (the accumulator is to be scaled by afac first, the value row taken whole), else
// 1 (the value row weighted by vfac).
inline uint8_t softmax_step(float s, float& m, float& afac, float& vfac) {
  if (s > m) {
    afac = std::exp(m - s);
    vfac = 1.0f;
    m = s;
    return 2;
  }
  afac = 1.0f;
  vfac = std::exp(s - m);
  return 1;
}

// acc[d] = f16(acc[d] * s) over [0, n).
inline void scale_h(uint16_t* acc, float s, int n) {
  int d = 0;
  const __m256 vs = _mm256_set1_ps(s);
  for (; d + 8 <= n; d += 8) store_h8(acc + d, _mm256_mul_ps(load_h8(acc + d), vs));
  for (; d < n; ++d) acc[d] = f2h(h2f(acc[d]) * s);
}

// acc[d] = f16(acc[d] + v[d] * s): fused over the row's 32-dim chunks, the multiply and add
// rounded separately over the tail (llama.cpp's order).
template <class Row>
inline void update(uint16_t* acc, const Row* v, float s, int dv) {
  const int dv32 = dv & ~31;
  const __m256 vs = _mm256_set1_ps(s);
  int d = 0;
  for (; d < dv32; d += 8) store_h8(acc + d, _mm256_fmadd_ps(load8(v + d), vs, load_h8(acc + d)));
  for (; d + 8 <= dv; d += 8) store_h8(acc + d, _mm256_add_ps(load_h8(acc + d), _mm256_mul_ps(load8(v + d), vs)));
  for (; d < dv; ++d) acc[d] = f2h(h2f(acc[d]) + value(v[d]) * s);
}

// out = acc / s_sum (0 when nothing was attended).
inline void finish(const uint16_t* acc, float s_sum, int dv, float* out) {
  const float inv = s_sum == 0.0f ? 0.0f : 1.0f / s_sum;
  const __m256 vinv = _mm256_set1_ps(inv);
  int d = 0;
  for (; d + 8 <= dv; d += 8) _mm256_storeu_ps(out + d, _mm256_mul_ps(load_h8(acc + d), vinv));
  for (; d < dv; ++d) out[d] = h2f(acc[d]) * inv;
}

// Per query and key of a chunk: what softmax_step returned (0: not attended) and its factors.
struct ChunkFactors {
  uint8_t what[kAvx2AttnChunk];
  float afac[kAvx2AttnChunk], vfac[kAvx2AttnChunk];
};

// The schedule of attention_group_avx2 and attention_seq_avx2. The online softmax is a chain
// per query through the running max and the F16 accumulator, one link per key. Keys go in
// chunks of kAvx2AttnChunk: first each query's scores of the chunk and its softmax factors
// (the dot products and exp calls of different keys are independent once the running max is
// known, a cheap scalar walk), then the accumulator updates key by key, query by query — so
// the exp latency leaves the accumulator's chain and the chains of several queries overlap.
// One key at a time (attention_head_avx2's walk) ran llama 110m's decode attention at about
// 1/3 of the AVX-512 rate, and its decode at depth 512 at 0.4-0.5x ik_llama.cpp's.
//
// for_chunks(seq, n_keys, scores(p, cell, nc), updates(cell, nc)): the chunks of keys
// [0, n_keys) within the sequence's blocks; p is a chunk's first position, cell its first of
// nc consecutive cells.
template <class Scores, class Updates>
inline void for_chunks(const KvSeqView& seq, int64_t n_keys, Scores&& scores, Updates&& updates) {
  for (int64_t p0 = 0; p0 < n_keys; p0 += seq.block_size) {
    const int64_t cell0 = int64_t(seq.blocks[size_t(p0 / seq.block_size)]) * seq.block_size;
    const int64_t n_in = std::min<int64_t>(seq.block_size, n_keys - p0);
    for (int64_t j0 = 0; j0 < n_in; j0 += kAvx2AttnChunk) {
      const int nc = int(std::min<int64_t>(kAvx2AttnChunk, n_in - j0));
      scores(p0 + j0, cell0 + j0, nc);
      updates(cell0 + j0, nc);
    }
  }
}

}  // namespace

void to_f16_avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store_h8(y + i, _mm256_loadu_ps(x + i));
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

void attention_head_avx2(const float* q, const KvCache& kv, int layer, int kv_head,
                         const KvSeqView& seq, int64_t n_kv, float scale, float* out,
                         uint16_t* scratch) {
  // Mirrors the structure of llama.cpp's AVX2 flash attention so that rounding agrees (score,
  // softmax_step, update: no fused multiply-adds outside the 32-dim chunks), one key at a
  // time: the reference schedule of attention_group_avx2 and attention_seq_avx2.
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
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
      float ms, vsc;
      if (softmax_step(score(k_base + (cell0 + j) * ks, q16, dk, scale), m, ms, vsc) == 2) scale_h(acc, ms, dv);
      update(acc, v_base + (cell0 + j) * vs_stride, vsc, dv);
      s_sum = s_sum * ms + vsc;
    }
  }
  finish(acc, s_sum, dv, out);
}

void attention_group_avx2(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                          int kv_head, const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                          const int64_t* kv_begin) {
  if (attention_group_avx2_wide(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, kv_begin)) return;
  // Per query, exactly attention_head_avx2's operations in its order, in chunks of keys
  // (for_chunks); each K and V row is converted to float once for all queries.
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  const int dkp = (dk + 7) & ~7;  // a K row's floats in the chunk
  // Scratch: acc[n_q][dv] halves, then floats: qf[n_q][dk], kf[kChunk][dkp], vf[dv] (aligned).
  uint16_t* acc = scratch;
  uintptr_t fp = reinterpret_cast<uintptr_t>(scratch + n_q * dv);
  fp = (fp + 31) & ~uintptr_t(31);
  float* qf = reinterpret_cast<float*>(fp);
  float* kf = qf + ((n_q * dk + 7) & ~7);
  float* vf = kf + kAvx2AttnChunk * dkp;
  float m[ops::kMaxGroupQueries], s_sum[ops::kMaxGroupQueries];
  ChunkFactors f[ops::kMaxGroupQueries];
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
  auto to_float = [](const uint16_t* h, float* x, int n) {
    int d = 0;
    for (; d + 8 <= n; d += 8) _mm256_storeu_ps(x + d, load_h8(h + d));
    for (; d < n; ++d) x[d] = h2f(h[d]);
  };
  auto scores = [&](int64_t p, int64_t cell, int nc) {
    for (int c = 0; c < nc; ++c) to_float(k_base + (cell + c) * ks, kf + c * dkp, dk);
    for (int i = 0; i < n_q; ++i)
      for (int c = 0; c < nc; ++c)
        f[i].what[c] = p + c >= n_kv[i] || (kv_begin && p + c < kv_begin[i])
                           ? 0
                           : softmax_step(score(kf + c * dkp, qf + i * dk, dk, scale), m[i], f[i].afac[c],
                                          f[i].vfac[c]);
  };
  auto updates = [&](int64_t cell, int nc) {
    for (int c = 0; c < nc; ++c) {
      to_float(v_base + (cell + c) * vs_stride, vf, dv);
      for (int i = 0; i < n_q; ++i) {
        if (f[i].what[c] == 0) continue;
        if (f[i].what[c] == 2) scale_h(acc + i * dv, f[i].afac[c], dv);
        update(acc + i * dv, vf, f[i].vfac[c], dv);
        s_sum[i] = s_sum[i] * f[i].afac[c] + f[i].vfac[c];
      }
    }
  };
  for_chunks(seq, max_kv, scores, updates);
  for (int i = 0; i < n_q; ++i) finish(acc + i * dv, s_sum[i], dv, out[i]);
}

bool attention_seq_avx2(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                        float scale) {
  // Every query gets exactly attention_head_avx2's operations in its order, in chunks of keys
  // over the queries of all heads (for_chunks), so that the accumulator chains of all heads
  // overlap (llama 110m's decode has one query per kv head: a walk per head leaves one chain
  // at a time). Rows are read as F16 where they are (each query its own head's).
  constexpr int kMaxDim = 256;
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  if (n_q < 1 || n_q > kMaxSeqQueries || dk > kMaxDim || dv > kMaxDim) return false;
  // Queries of one kv head (prompt units): each K and V row converted once for all of them.
  if (n_q > 1 && std::all_of(qs, qs + n_q, [&](const AttnQuery& a) { return a.kv_head == qs[0].kv_head; })) {
    const float* q[kMaxSeqQueries];
    float* out[kMaxSeqQueries];
    int64_t n_kv[kMaxSeqQueries];
    for (int i = 0; i < n_q; ++i) {
      q[i] = qs[i].q;
      out[i] = qs[i].out;
      n_kv[i] = qs[i].n_kv;
    }
    if (attention_group_avx2_wide(q, n_kv, n_q, kv, layer, qs[0].kv_head, seq, scale, out, nullptr)) return true;
  }
  alignas(32) uint16_t q16[kMaxSeqQueries][kMaxDim];
  alignas(32) uint16_t acc[kMaxSeqQueries][kMaxDim];
  float m[kMaxSeqQueries], s_sum[kMaxSeqQueries];
  ChunkFactors f[kMaxSeqQueries];
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
  // Key by key, the queries of each key in turn: the cells are read in order, front to back
  // (a query's walk over the chunk read every cell's K at a stride, each query a
  // different slice: 81% of the scores' time waited on those loads; perf, llama 110m
  // decode at depth 512 on AVX2). Each query's own steps keep their order.
  auto scores = [&](int64_t p, int64_t cell, int nc) {
    for (int c = 0; c < nc; ++c) {
      const uint16_t* kc = k_base + (cell + c) * ks;
      for (int i = 0; i < n_q; ++i)
        f[i].what[c] = p + c >= qs[i].n_kv ? 0
                                           : softmax_step(score(kc + int64_t(qs[i].kv_head) * dk, q16[i], dk, scale),
                                                          m[i], f[i].afac[c], f[i].vfac[c]);
    }
  };
  auto updates = [&](int64_t cell, int nc) {
    for (int c = 0; c < nc; ++c) {
      const uint16_t* vc = v_base + (cell + c) * vs_stride;
      for (int i = 0; i < n_q; ++i) {
        if (f[i].what[c] == 0) continue;
        if (f[i].what[c] == 2) scale_h(acc[i], f[i].afac[c], dv);
        update(acc[i], vc + int64_t(qs[i].kv_head) * dv, f[i].vfac[c], dv);
        s_sum[i] = s_sum[i] * f[i].afac[c] + f[i].vfac[c];
      }
    }
  };
  for_chunks(seq, max_kv, scores, updates);
  for (int i = 0; i < n_q; ++i) finish(acc[i], s_sum[i], dv, qs[i].out);
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
