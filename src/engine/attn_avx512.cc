// AVX-512 attention for the common head sizes (64, 128, 256), bit-identical to
// attention_group_avx2 (and so to llama.cpp's CPU flash attention): every query performs
// exactly the same float operations in the same order; only the schedule differs.
//
// Why it is faster: the online softmax is a chain through the running max, the sum and
// the F16 accumulator, one link per key. The AVX2 version walks that chain with the
// accumulator in memory (a store-to-load round trip per key) and interleaves it with the
// dot products and exp calls. Here keys go in chunks of 16: first all dot products of the
// chunk (independent, full ILP), then the chunk's softmax factors (independent exp calls
// given the running max), then the accumulator update with the accumulator held in
// registers, rounded to F16 in-register (cvtps2ph + cvtph2ps) exactly where AVX2 stores
// and reloads halves. K and V rows are converted to float once per chunk for all queries.
//
// Scalar parts must not be contracted into FMAs (the AVX2 file compiles them the same way).
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns about the unused pass-through operand of masked AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/ops.h"
#include "ops_internal.h"

namespace ts::engine::ops::detail {
namespace {

constexpr int kChunk = 16;  // keys per chunk

inline __m512 round_h(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
inline __m512 load_h16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The 8-lane horizontal sum of the AVX2 path, in its order.
inline float hsum8(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// The AVX2 dot keeps four 8-lane sums a0..a3 over dims [32c, 32c+8), [+8, +16), [+16, +24),
// [+24, +32) of every 32-dim chunk c and returns hsum((a0 + a2) + (a1 + a3)). Here
// za = [a0 | a1] and zb = [a2 | a3] in 16-lane registers: the same lanes, the same FMAs.
template <int D>
inline float dot(const __m512* k, const float* q) {
  __m512 za = _mm512_setzero_ps(), zb = za;
#pragma GCC unroll 8
  for (int c = 0; c < D / 32; ++c) {
    za = _mm512_fmadd_ps(k[2 * c], _mm512_loadu_ps(q + 32 * c), za);
    zb = _mm512_fmadd_ps(k[2 * c + 1], _mm512_loadu_ps(q + 32 * c + 16), zb);
  }
  const __m512 t = _mm512_add_ps(za, zb);
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(t), _mm512_extractf32x8_ps(t, 1)));
}

template <int D>
void group(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer, int kv_head,
           const KvSeqView& seq, float scale, float* const* out) {
  constexpr int NV = D / 16;  // registers per row
  alignas(64) float qf[kMaxGroupQueries][D];
  alignas(64) float acc[kMaxGroupQueries][D];  // F16-representable values
  alignas(64) float vf[kChunk][D];
  float s[kMaxGroupQueries][kChunk];
  float m[kMaxGroupQueries], s_sum[kMaxGroupQueries];
  int64_t max_kv = 0;
  for (int i = 0; i < n_q; ++i) {
    for (int r = 0; r < NV; ++r) _mm512_store_ps(qf[i] + 16 * r, round_h(_mm512_loadu_ps(q[i] + 16 * r)));
    std::memset(acc[i], 0, sizeof(acc[i]));
    m[i] = -std::numeric_limits<float>::infinity();
    s_sum[i] = 0.0f;
    max_kv = std::max(max_kv, n_kv[i]);
  }
  const int64_t ks = kv.k_cell_stride(), vs = kv.v_cell_stride();
  const uint16_t* k_base = kv.k(layer, 0) + int64_t(kv_head) * D;
  const uint16_t* v_base = kv.v(layer, 0) + int64_t(kv_head) * D;
  // Cells of positions [p, p + n), walking the block table without a division per key.
  auto cells_of = [&](int64_t p, int n, int64_t* cells) {
    int64_t b = p / seq.block_size, o = p % seq.block_size;
    for (int j = 0; j < n; ++j) {
      cells[j] = int64_t(seq.blocks[size_t(b)]) * seq.block_size + o;
      if (++o == seq.block_size) {
        o = 0;
        ++b;
      }
    }
  };
  int64_t cur[kChunk], next[kChunk];
  cells_of(0, int(std::min<int64_t>(kChunk, max_kv)), cur);
  for (int64_t p0 = 0; p0 < max_kv; p0 += kChunk) {
    const int c = int(std::min<int64_t>(kChunk, max_kv - p0));
    // Prefetch the next chunk's rows: one head's slice of every cell is a strided walk that
    // the hardware prefetchers follow poorly, and decode is bound by this read.
    const int c_next = int(std::clamp<int64_t>(max_kv - p0 - kChunk, 0, kChunk));
    cells_of(p0 + kChunk, c_next, next);
    for (int j = 0; j < c_next; ++j) {
      const char* kr = reinterpret_cast<const char*>(k_base + next[j] * ks);
      const char* vr = reinterpret_cast<const char*>(v_base + next[j] * vs);
      for (int off = 0; off < D * 2; off += 64) {
        _mm_prefetch(kr + off, _MM_HINT_T0);
        _mm_prefetch(vr + off, _MM_HINT_T0);
      }
    }
    // Scores of the chunk for every query that sees the key; V rows to float.
    for (int j = 0; j < c; ++j) {
      const uint16_t* kr = k_base + cur[j] * ks;
      const uint16_t* vr = v_base + cur[j] * vs;
      __m512 kreg[NV];
#pragma GCC unroll 16
      for (int r = 0; r < NV; ++r) kreg[r] = load_h16(kr + 16 * r);
#pragma GCC unroll 16
      for (int r = 0; r < NV; ++r) _mm512_store_ps(vf[j] + 16 * r, load_h16(vr + 16 * r));
      for (int i = 0; i < n_q; ++i)
        if (p0 + j < n_kv[i]) s[i][j] = float(double(dot<D>(kreg, qf[i]))) * scale;
    }
    for (int i = 0; i < n_q; ++i) {
      const int ci = int(std::min<int64_t>(c, n_kv[i] - p0));
      if (ci <= 0) continue;
      // Softmax factors: the running max is a cheap chain; the exp calls are independent.
      float ms[kChunk], vsc[kChunk];
      bool moved[kChunk];
      float mi = m[i], sum = s_sum[i];
      for (int j = 0; j < ci; ++j) {
        const float sj = s[i][j];
        ms[j] = 1.0f;
        vsc[j] = 1.0f;
        moved[j] = sj > mi;
        if (moved[j]) {
          ms[j] = std::exp(mi - sj);
          mi = sj;
        } else {
          vsc[j] = std::exp(sj - mi);
        }
        sum = sum * ms[j] + vsc[j];
      }
      m[i] = mi;
      s_sum[i] = sum;
      // The accumulator chain, in registers.
      __m512 a[NV];
#pragma GCC unroll 16
      for (int r = 0; r < NV; ++r) a[r] = _mm512_load_ps(acc[i] + 16 * r);
      for (int j = 0; j < ci; ++j) {
        if (moved[j]) {
          const __m512 vm = _mm512_set1_ps(ms[j]);
#pragma GCC unroll 16
          for (int r = 0; r < NV; ++r) a[r] = round_h(_mm512_mul_ps(a[r], vm));
        }
        const __m512 vv = _mm512_set1_ps(vsc[j]);
#pragma GCC unroll 16
        for (int r = 0; r < NV; ++r) a[r] = round_h(_mm512_fmadd_ps(_mm512_load_ps(vf[j] + 16 * r), vv, a[r]));
      }
#pragma GCC unroll 16
      for (int r = 0; r < NV; ++r) _mm512_store_ps(acc[i] + 16 * r, a[r]);
    }
    std::copy(next, next + c_next, cur);
  }
  for (int i = 0; i < n_q; ++i) {
    const float inv = s_sum[i] == 0.0f ? 0.0f : 1.0f / s_sum[i];
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int r = 0; r < NV; ++r) _mm512_storeu_ps(out[i] + 16 * r, _mm512_mul_ps(_mm512_load_ps(acc[i] + 16 * r), vinv));
  }
}

// Applies the softmax factors of keys [0, ci) of a chunk to G accumulators at once, the
// G chains interleaved (each chain is serial: FMA, round to F16, next key). v[g][j] points
// at the F16 value row of key j for query g.
template <int D, int G>
inline void accumulate(float* const* acc, const uint16_t* const (*v)[kChunk], const bool (*moved)[kChunk],
                       const float (*ms)[kChunk], const float (*vsc)[kChunk], int ci) {
  constexpr int NV = D / 16;
  __m512 a[G][NV];
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 16
    for (int r = 0; r < NV; ++r) a[g][r] = _mm512_load_ps(acc[g] + 16 * r);
  for (int j = 0; j < ci; ++j) {
#pragma GCC unroll 16
    for (int g = 0; g < G; ++g) {
      if (moved[g][j]) {
        const __m512 vm = _mm512_set1_ps(ms[g][j]);
#pragma GCC unroll 16
        for (int r = 0; r < NV; ++r) a[g][r] = round_h(_mm512_mul_ps(a[g][r], vm));
      }
      const __m512 vv = _mm512_set1_ps(vsc[g][j]);
#pragma GCC unroll 16
      for (int r = 0; r < NV; ++r) a[g][r] = round_h(_mm512_fmadd_ps(load_h16(v[g][j] + 16 * r), vv, a[g][r]));
    }
  }
#pragma GCC unroll 16
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 16
    for (int r = 0; r < NV; ++r) _mm512_store_ps(acc[g] + 16 * r, a[g][r]);
}

// attention_seq: per query the float operations of group<D> in the same order. Keys go in
// chunks of 16; per key the cell's heads are visited in query order (contiguous reads),
// then every query's softmax factors, then the accumulator chains, G at a time.
template <int D>
void seq_heads(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale) {
  constexpr int NV = D / 16;
  constexpr int G = NV <= 4 ? 4 : NV <= 8 ? 2 : 1;  // chains interleaved (G * NV <= 16 registers)
  alignas(64) float qf[kMaxSeqQueries][D];
  alignas(64) float acc[kMaxSeqQueries][D];  // F16-representable values
  float s[kMaxSeqQueries][kChunk];
  float ms[kMaxSeqQueries][kChunk], vsc[kMaxSeqQueries][kChunk];
  bool moved[kMaxSeqQueries][kChunk];
  const uint16_t* vrow[kMaxSeqQueries][kChunk];
  float m[kMaxSeqQueries], s_sum[kMaxSeqQueries];
  int ci[kMaxSeqQueries];
  int64_t max_kv = 0;
  int h_lo = qs[0].kv_head, h_hi = qs[0].kv_head;
  for (int i = 0; i < n_q; ++i) {
    for (int r = 0; r < NV; ++r) _mm512_store_ps(qf[i] + 16 * r, round_h(_mm512_loadu_ps(qs[i].q + 16 * r)));
    std::memset(acc[i], 0, sizeof(acc[i]));
    m[i] = -std::numeric_limits<float>::infinity();
    s_sum[i] = 0.0f;
    max_kv = std::max(max_kv, qs[i].n_kv);
    h_lo = std::min(h_lo, qs[i].kv_head);
    h_hi = std::max(h_hi, qs[i].kv_head);
  }
  const int64_t ks = kv.k_cell_stride(), vs = kv.v_cell_stride();
  const uint16_t* k_base = kv.k(layer, 0);
  const uint16_t* v_base = kv.v(layer, 0);
  const int span_bytes = (h_hi - h_lo + 1) * D * 2;  // bytes of the heads used, per cell
  auto cells_of = [&](int64_t p, int n, int64_t* cells) {
    int64_t b = p / seq.block_size, o = p % seq.block_size;
    for (int j = 0; j < n; ++j) {
      cells[j] = int64_t(seq.blocks[size_t(b)]) * seq.block_size + o;
      if (++o == seq.block_size) {
        o = 0;
        ++b;
      }
    }
  };
  int64_t cur[kChunk], next[kChunk];
  cells_of(0, int(std::min<int64_t>(kChunk, max_kv)), cur);
  for (int64_t p0 = 0; p0 < max_kv; p0 += kChunk) {
    const int c = int(std::min<int64_t>(kChunk, max_kv - p0));
    const int c_next = int(std::clamp<int64_t>(max_kv - p0 - kChunk, 0, kChunk));
    cells_of(p0 + kChunk, c_next, next);
    for (int j = 0; j < c_next; ++j) {
      const char* kr = reinterpret_cast<const char*>(k_base + next[j] * ks + int64_t(h_lo) * D);
      const char* vr = reinterpret_cast<const char*>(v_base + next[j] * vs + int64_t(h_lo) * D);
      for (int off = 0; off < span_bytes; off += 64) {
        _mm_prefetch(kr + off, _MM_HINT_T0);
        _mm_prefetch(vr + off, _MM_HINT_T0);
      }
    }
    for (int i = 0; i < n_q; ++i) ci[i] = int(std::clamp<int64_t>(qs[i].n_kv - p0, 0, c));
    // Scores; K of a head is converted once for the run of queries of that head.
    for (int j = 0; j < c; ++j) {
      const uint16_t* kcell = k_base + cur[j] * ks;
      const uint16_t* vcell = v_base + cur[j] * vs;
      __m512 kreg[NV];
      int loaded = -1;
      for (int i = 0; i < n_q; ++i) {
        const int h = qs[i].kv_head;
        vrow[i][j] = vcell + int64_t(h) * D;
        if (j >= ci[i]) continue;
        if (h != loaded) {
#pragma GCC unroll 16
          for (int r = 0; r < NV; ++r) kreg[r] = load_h16(kcell + int64_t(h) * D + 16 * r);
          loaded = h;
        }
        s[i][j] = float(double(dot<D>(kreg, qf[i]))) * scale;
      }
    }
    // Softmax factors (as group<D>).
    for (int i = 0; i < n_q; ++i) {
      float mi = m[i], sum = s_sum[i];
      for (int j = 0; j < ci[i]; ++j) {
        const float sj = s[i][j];
        ms[i][j] = 1.0f;
        vsc[i][j] = 1.0f;
        moved[i][j] = sj > mi;
        if (moved[i][j]) {
          ms[i][j] = std::exp(mi - sj);
          mi = sj;
        } else {
          vsc[i][j] = std::exp(sj - mi);
        }
        sum = sum * ms[i][j] + vsc[i][j];
      }
      m[i] = mi;
      s_sum[i] = sum;
    }
    // Accumulator chains: G queries with the same key count together, the rest one by one.
    for (int i = 0; i < n_q;) {
      bool same = i + G <= n_q;
      for (int g = 1; same && g < G; ++g) same = ci[i + g] == ci[i];
      if (same) {
        float* a[G];
        for (int g = 0; g < G; ++g) a[g] = acc[i + g];
        accumulate<D, G>(a, vrow + i, moved + i, ms + i, vsc + i, ci[i]);
        i += G;
      } else {
        float* a = acc[i];
        accumulate<D, 1>(&a, vrow + i, moved + i, ms + i, vsc + i, ci[i]);
        ++i;
      }
    }
    std::copy(next, next + c_next, cur);
  }
  for (int i = 0; i < n_q; ++i) {
    const float inv = s_sum[i] == 0.0f ? 0.0f : 1.0f / s_sum[i];
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int r = 0; r < NV; ++r) _mm512_storeu_ps(qs[i].out + 16 * r, _mm512_mul_ps(_mm512_load_ps(acc[i] + 16 * r), vinv));
  }
}

}  // namespace

bool attention_seq_avx512(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                          float scale) {
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  if (dk != dv || n_q < 1 || n_q > kMaxSeqQueries) return false;
  switch (dk) {
    case 64: seq_heads<64>(qs, n_q, kv, layer, seq, scale); return true;
    case 128: seq_heads<128>(qs, n_q, kv, layer, seq, scale); return true;
    case 256: seq_heads<256>(qs, n_q, kv, layer, seq, scale); return true;
    default: return false;
  }
}

bool attention_group_avx512(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                            int kv_head, const KvSeqView& seq, float scale, float* const* out) {
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  if (dk != dv) return false;
  switch (dk) {
    case 64: group<64>(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out); return true;
    case 128: group<128>(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out); return true;
    case 256: group<256>(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out); return true;
    default: return false;
  }
}

}  // namespace ts::engine::ops::detail
