// AVX-512 attention for the common head sizes (64, 128, 256), bit-identical to
// attention_group_avx2 (and so to llama.cpp's CPU flash attention): every query performs
// exactly the same float operations in the same order; only the schedule differs.
//
// Why it is faster: the online softmax is a chain through the running max, the sum and
// the F16 accumulator, one link per key. The AVX2 version walks one query's chain at a
// time and interleaves it with the dot products and exp calls. Here keys go in chunks of
// 16: first all dot products of the chunk (independent, full ILP), the 16 horizontal sums
// of a key (one per query) in one transposed reduction tree that adds, per query, the same
// lane pairs in the same order as the AVX2 path's sum of one vector; then the softmax
// factors and accumulator updates key by key, query by query, so that the chains of all
// queries overlap each other (an update loads the F16 accumulator, one FMA, stores it as
// F16, exactly where AVX2 stores and reloads halves). With many queries of up to 128
// dimensions the factors are computed 16 queries per register with expf16, which is
// libm's expf bit for bit (expf_avx512.h); otherwise with libm calls between the updates.
// K and V rows are converted to float once per chunk for all queries of one kv head.
//
// Scalar parts must not be contracted into FMAs (the AVX2 file compiles them the same way).
#pragma GCC optimize("fp-contract=off")
// GCC 12 warns about the unused pass-through operand of masked AVX-512 intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/cpu_features.h"
#include "ops/ops.h"
#include "attn_tiled_ref.h"
#include "expf_avx512.h"
#include "ops_internal.h"

namespace ts::ops::detail {
namespace {

// Keys per chunk: scores of a chunk, then its factors and updates. Units that stream the
// cache (decode: few queries per kv head, every cell read once) take short chunks, so the
// K and V walks alternate often and the prefetchers keep both streams going (16 sequences
// of llama 110m decoding: attention 25% faster with 4 keys than with 16, Gemma 3 22%);
// units that reuse each cell for many queries (prompts) take long ones (3-7% faster).
constexpr int kChunk = 16;        // the most keys per chunk
constexpr int kStreamChunk = 4;   // the keys per chunk of streaming units
constexpr int kStreamMaxReuse = 8;  // queries per kv head up to which a unit streams
template <int C>
constexpr bool kValidChunk = C >= 1 && C <= kChunk;
#define TS_ATTN_INLINE inline __attribute__((always_inline))

// F16 conversions (the same bits either way) in the form the CPU runs fastest, the kernels'
// template parameter W (wide):
// - W = false, 8 lanes per instruction, for CPUs that execute 512-bit operations as two
//   256-bit halves (CpuFeatures::avx512_split: Zen 4). There two 256-bit vcvtph2ps /
//   vcvtps2ph convert 16 lanes faster than one 512-bit form, and vcvtps2ph into a register
//   plus a plain store is faster than its memory form: one accumulator update of 16 lanes
//   (2 loads converted, an FMA, a rounding store; rows in L2) took 1.31 ns with 512-bit
//   forms, 1.17 ns with 256-bit ones and 0.96 ns stored from a register (attn_bench
//   f16_update/{zmm,ymm,ymm_reg}; group/256 12.2 -> 11.9 ms, seq/64 13.2-13.8 -> 12.4-12.8).
// - W = true, 16 lanes per instruction, for CPUs with full-width 512-bit units (Zen 5,
//   Intel), in the units that reuse cells for many queries (prompts). On Zen 5 the 512-bit
//   update runs at 1.72 G/s against 1.24 G/s for the 256-bit one from a register;
//   attn_bench (3 alternating runs, M pairs/s): group/256 59-61 -> 82-84, seq/64 168-177
//   -> 208-217, seq/128/gqa4 110-112 -> 142-148; prompts of 479 tokens end to end (5
//   alternating runs, medians): 110m Q8_0 1958 -> 2105 tok/s (t1), 3715 -> 3839 (t2), Gemma
//   3 270M 1828 -> 1922 (t1); 0.5b Q4_K_M 1033 -> 1104 (t2, 3 runs). Streaming units
//   (decode) keep W = false: there 16 lanes gained 12-14% with one thread (seq/64/decode
//   120-123 -> 134-143, group/256/decode 53-55 -> 74-75) but seq/64/decode16 on 2 threads
//   stayed at 8-9 M cells/s where 8 lanes reached 12-13 in most runs, and decode end to end
//   (110m Q8_0 at depth 479, 16 sequences of 110m and Gemma 3) moved within the noise.
// The kTiledF32 kernels below (not the default numerics) keep the 8-lane loads; the 16-lane
// form was not measured there.
inline __m512 round_h(__m512 v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
inline __m256 round_h8(__m256 v) { return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }
inline __m256 load_h8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
template <bool W = false>
inline __m512 load_h16(const uint16_t* p) {
  if constexpr (W)
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  else
    return _mm512_insertf32x8(_mm512_castps256_ps512(load_h8(p)), load_h8(p + 8), 1);
}
// The empty asm keeps GCC from folding the conversion and the store into the memory form.
inline void store_h8(uint16_t* p, __m256 v) {
  __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  asm("" : "+x"(h));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}
inline void store_h16(uint16_t* p, __m512 v) {
  __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
  asm("" : "+x"(h));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
}

// The AVX2 dot keeps four 8-lane sums a0..a3 over dims [32c, 32c+8), [+8, +16), [+16, +24),
// [+24, +32) of every 32-dim chunk c and returns hsum8((a0 + a2) + (a1 + a3)). Here
// za = [a0 | a1] and zb = [a2 | a3] in 16-lane registers: the same lanes, the same FMAs.
// dot16 returns t = za + zb; the AVX2 order then sums u_i = t_i + t_(i+8) (i < 8), then
// w_i = u_i + u_(i+4) (i < 4), then x_0 = w_0 + w_2 and x_1 = w_1 + w_3, then x_0 + x_1.
template <int D>
inline __m512 dot16(const __m512* k, const float* q) {
  __m512 za = _mm512_setzero_ps(), zb = za;
#pragma GCC unroll 8
  for (int c = 0; c < D / 32; ++c) {
    za = _mm512_fmadd_ps(k[2 * c], _mm512_loadu_ps(q + 32 * c), za);
    zb = _mm512_fmadd_ps(k[2 * c + 1], _mm512_loadu_ps(q + 32 * c + 16), zb);
  }
  return _mm512_add_ps(za, zb);
}

// The reduction tree over 16 vectors t(0..15), level by level as the order above; each
// level adds two registers' worth of halves. Notation: a 16-lane register is four 128-bit
// quarters Q0..Q3.
// Level 1: [u(a) | u(b)] from t(a), t(b) (quarters Q0,Q1 + Q2,Q3 of each).
inline __m512 sum_u(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}
// Level 2: [w(a) | w(b) | w(c) | w(d)] from [u(a) | u(b)] and [u(c) | u(d)].
inline __m512 sum_w(__m512 ab, __m512 cd) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
}
// Level 3: quarter k holds x_0, x_1 of quarter k of `lo`, then x_0, x_1 of quarter k of `hi`.
inline __m512 sum_x(__m512 lo, __m512 hi) {
  return _mm512_add_ps(_mm512_shuffle_ps(lo, hi, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 2, 3, 2)));
}
// Level 4: the sums x_0 + x_1 of the four keys of every quarter.
inline __m512 sum_final(__m512 lo, __m512 hi) {
  return _mm512_add_ps(_mm512_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The 16 horizontal sums of t(0..n-1) (zero vectors for n..15) in lane order: lane i is
// t(i)'s sum exactly as the AVX2 path adds it. t is called in index order (callers may
// interleave other work with it). The tree leaves vector p in lane 4 * (p % 4) + p / 4 (a
// 4x4 transpose of the lane index), undone by one permutation.
template <typename T>
inline __m512 hsum16(T&& t, int n) {
  auto in = [&](int i) { return i < n ? t(i) : _mm512_setzero_ps(); };
  __m512 w[4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512 t0 = in(4 * g);
    const __m512 t1 = in(4 * g + 1);
    const __m512 ab = sum_u(t0, t1);
    const __m512 t2 = in(4 * g + 2);
    const __m512 t3 = in(4 * g + 3);
    w[g] = sum_w(ab, sum_u(t2, t3));
  }
  const __m512 f = sum_final(sum_x(w[0], w[1]), sum_x(w[2], w[3]));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), f);
}

inline __m256 load_v8(const float* p) { return _mm256_load_ps(p); }
inline __m256 load_v8(const uint16_t* p) { return load_h8(p); }
inline __m512 load_v16(const float* p) { return _mm512_load_ps(p); }
inline __m512 load_v16(const uint16_t* p) { return load_h16<true>(p); }

// One accumulator update: acc = f16(v * vsc + acc), the accumulator first rescaled
// (f16(acc * ms)) when the query's max moved at this key. The accumulators are F16 in
// memory, as the AVX2 path and llama.cpp keep them: a load converts, a store rounds.
// (Kept as F16-valued floats, with the same two conversions per update, each update
// stored and reloaded 64 bytes a vector instead of 32: prompt attention 2-6% slower,
// attn_bench group/256, seq/64, seq/128/gqa4.)
template <int D, bool W, typename VRow>
TS_ATTN_INLINE void update_acc(uint16_t* acc, const VRow* v, float vsc, bool moved, float ms) {
  if constexpr (W) {
    const __m512 vv = _mm512_set1_ps(vsc);
    if (moved) {
      const __m512 vm = _mm512_set1_ps(ms);
#pragma GCC unroll 16
      for (int r = 0; r < D / 16; ++r) {
        const __m512 a = round_h(_mm512_mul_ps(load_h16<true>(acc + 16 * r), vm));
        store_h16(acc + 16 * r, _mm512_fmadd_ps(load_v16(v + 16 * r), vv, a));
      }
    } else {
#pragma GCC unroll 16
      for (int r = 0; r < D / 16; ++r)
        store_h16(acc + 16 * r, _mm512_fmadd_ps(load_v16(v + 16 * r), vv, load_h16<true>(acc + 16 * r)));
    }
    return;
  }
  const __m256 vv = _mm256_set1_ps(vsc);
  if (moved) {
    const __m256 vm = _mm256_set1_ps(ms);
#pragma GCC unroll 32
    for (int r = 0; r < D / 8; ++r) {
      const __m256 a = round_h8(_mm256_mul_ps(load_h8(acc + 8 * r), vm));
      store_h8(acc + 8 * r, _mm256_fmadd_ps(load_v8(v + 8 * r), vv, a));
    }
  } else {
#pragma GCC unroll 32
    for (int r = 0; r < D / 8; ++r)
      store_h8(acc + 8 * r, _mm256_fmadd_ps(load_v8(v + 8 * r), vv, load_h8(acc + 8 * r)));
  }
}

// Softmax factors and accumulator updates of keys [0, c) of a chunk, query i taking keys
// [0, ci[i]), scores st[j * ss + i], value rows vrow(i, j); per query, the float
// operations of the AVX2 path in its order.
// First the factors of every key, 16 queries per register (lanes), key after key: the
// running max and sum are chains per lane, and exp (expf16: libm's expf, 16 at a time)
// hangs off them, so the exps of a chunk overlap. Then the accumulator updates, key by
// key and query by query, so that the chains of all queries overlap each other; the
// accumulators stay in memory as F16 (update_acc).
template <int D, bool W, typename V>
inline void softmax_accumulate_vector(const float* st, int ss, int c, const int* ci, const int* lo, int n_q, float* m,
                                      float* s_sum, uint16_t (*acc)[D], V&& vrow) {
  static_assert(kMaxSeqQueries >= kMaxGroupQueries && kMaxSeqQueries <= 32);
  alignas(64) float f_ms[kChunk][kMaxSeqQueries], f_vsc[kChunk][kMaxSeqQueries];
  uint32_t moved[kChunk] = {};  // bit i: query i's max moved at this key (its accumulator rescales)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int b = 0; b < n_q; b += 16) {
    const __mmask16 lanes = n_q - b >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n_q - b)) - 1);
    __m512 mv = _mm512_maskz_loadu_ps(lanes, m + b);
    __m512 sv = _mm512_maskz_loadu_ps(lanes, s_sum + b);
    const __m512i cv = _mm512_maskz_loadu_epi32(lanes, ci + b);
    const __m512i lv = lo ? _mm512_maskz_loadu_epi32(lanes, lo + b) : _mm512_setzero_si512();
    for (int j = 0; j < c; ++j) {
      const __mmask16 before_end = lanes & _mm512_cmpgt_epi32_mask(cv, _mm512_set1_epi32(j));
      if (before_end == 0) break;  // no query takes this key, nor any later one
      const __mmask16 act = before_end & _mm512_cmple_epi32_mask(lv, _mm512_set1_epi32(j));
      if (act == 0) continue;  // the queries taking later keys start after this one
      const __m512 sj = _mm512_loadu_ps(st + j * ss + b);
      const __mmask16 mov = act & _mm512_cmp_ps_mask(sj, mv, _CMP_GT_OQ);  // sj > m
      // moved: ms = exp(m - sj), m = sj; else vsc = exp(sj - m).
      const __m512 e = expf16(_mm512_mask_blend_ps(mov, _mm512_sub_ps(sj, mv), _mm512_sub_ps(mv, sj)), act);
      const __m512 ms = _mm512_mask_blend_ps(mov, one, e);
      const __m512 vsc = _mm512_mask_blend_ps(mov, e, one);
      mv = _mm512_mask_blend_ps(mov, mv, sj);
      sv = _mm512_mask_blend_ps(act, sv, _mm512_add_ps(_mm512_mul_ps(sv, ms), vsc));  // s_sum * ms + vsc
      _mm512_storeu_ps(f_ms[j] + b, ms);
      _mm512_storeu_ps(f_vsc[j] + b, vsc);
      moved[j] |= uint32_t(mov) << b;
    }
    _mm512_mask_storeu_ps(m + b, lanes, mv);
    _mm512_mask_storeu_ps(s_sum + b, lanes, sv);
  }
  for (int j = 0; j < c; ++j)
    for (int i = 0; i < n_q; ++i) {
      if (j >= ci[i] || (lo && j < lo[i])) continue;
      update_acc<D, W>(acc[i], vrow(i, j), f_vsc[j][i], moved[j] >> i & 1u, f_ms[j][i]);
    }
}

// softmax_accumulate with libm exp calls between the updates: key by key and query by
// query.
// The accumulators stay in memory: between two updates of one query come those of all
// other queries, so the chains overlap without being held in registers, and the exp calls
// (which clobber every vector register) cost no spills. The factors of key j + 1 are
// computed after the update of key j, so that no update waits for its exp call. Per
// query, the float operations of the AVX2 path in its order.
template <int D, bool W, typename V>
inline void softmax_accumulate_scalar(const float* st, int ss, int c, const int* ci, const int* lo, int n_q, float* m,
                                      float* s_sum, uint16_t (*acc)[D], V&& vrow) {
  static_assert(kMaxSeqQueries >= kMaxGroupQueries);
  float f_ms[kMaxSeqQueries], f_vsc[kMaxSeqQueries];  // factors of each query's next key
  bool f_moved[kMaxSeqQueries];
  auto factors = [&](int i, int j) {
    const float sj = st[j * ss + i];
    float ms = 1.0f, vsc = 1.0f;
    const bool moved = sj > m[i];
    if (moved) {
      ms = std::exp(m[i] - sj);
      m[i] = sj;
    } else {
      vsc = std::exp(sj - m[i]);
    }
    s_sum[i] = s_sum[i] * ms + vsc;
    f_ms[i] = ms;
    f_vsc[i] = vsc;
    f_moved[i] = moved;
  };
  for (int i = 0; i < n_q; ++i) {
    const int first = lo ? lo[i] : 0;
    if (first < ci[i]) factors(i, first);
  }
  for (int j = 0; j < c; ++j)
    for (int i = 0; i < n_q; ++i) {
      if (j >= ci[i] || (lo && j < lo[i])) continue;
      update_acc<D, W>(acc[i], vrow(i, j), f_vsc[i], f_moved[i], f_ms[i]);
      if (j + 1 < ci[i]) factors(i, j + 1);
    }
}

// Softmax factors and accumulator updates of a chunk, the same float operations either
// way. The vector factors pay for a whole register of exps per key: they win with many
// queries and short rows (llama 110m: prompt attention 9% and 16-sequence decode
// attention 6% faster, attn_bench), the libm calls between updates win with few queries
// or long rows (Gemma 3's 4 query heads of 256: decode 25% slower with vector factors).
// With 16-lane conversions (W) the updates are cheaper and long rows take the vector
// factors too (Zen 5, attn_bench group/256, Gemma's prompt units of 16 queries, two sets of
// 3 alternating runs: 77-84 -> 85-89 M pairs/s).
// ci[i]: query i takes keys [lo[i], ci[i]) of the chunk (lo null: from 0).
template <int D, bool W, typename V>
inline void softmax_accumulate(const float* st, int ss, int c, const int* ci, const int* lo, int n_q, float* m,
                               float* s_sum, uint16_t (*acc)[D], V&& vrow) {
  if ((D <= 128 || W) && n_q >= 8)
    softmax_accumulate_vector<D, W>(st, ss, c, ci, lo, n_q, m, s_sum, acc, vrow);
  else
    softmax_accumulate_scalar<D, W>(st, ss, c, ci, lo, n_q, m, s_sum, acc, vrow);
}

// Cells of positions [p, p + n) of a block table, without a division per key.
inline void cells_of(const KvSeqView& seq, int64_t p, int n, int64_t* cells) {
  int64_t b = p / seq.block_size, o = p % seq.block_size;
  for (int j = 0; j < n; ++j) {
    cells[j] = int64_t(seq.blocks[size_t(b)]) * seq.block_size + o;
    if (++o == seq.block_size) {
      o = 0;
      ++b;
    }
  }
}

// Requests bytes [0, n_bytes) of the K and V rows of `n` cells into L1.
inline void prefetch_rows(const uint16_t* k_base, int64_t ks, const uint16_t* v_base, int64_t vs, const int64_t* cells,
                          int n, int n_bytes) {
  for (int j = 0; j < n; ++j) {
    const char* kr = reinterpret_cast<const char*>(k_base + cells[j] * ks);
    const char* vr = reinterpret_cast<const char*>(v_base + cells[j] * vs);
    for (int off = 0; off < n_bytes; off += 64) {
      _mm_prefetch(kr + off, _MM_HINT_T0);
      _mm_prefetch(vr + off, _MM_HINT_T0);
    }
  }
}

// Keys [0, max_kv) of a sequence in chunks of C: body(p0, c, cur, next, c_next) for the
// chunk of keys [p0, p0 + c), with the cells of the chunk (cur) and of the next one
// (next, c_next of them, to prefetch).
template <int C, typename Body>
TS_ATTN_INLINE void for_chunks(const KvSeqView& seq, int64_t max_kv, Body&& body) {
  static_assert(kValidChunk<C>);
  int64_t cur[C], next[C];
  cells_of(seq, 0, int(std::min<int64_t>(C, max_kv)), cur);
  for (int64_t p0 = 0; p0 < max_kv; p0 += C) {
    const int c = int(std::min<int64_t>(C, max_kv - p0));
    const int c_next = int(std::clamp<int64_t>(max_kv - p0 - C, 0, C));
    cells_of(seq, p0 + C, c_next, next);
    body(p0, c, static_cast<const int64_t*>(cur), static_cast<const int64_t*>(next), c_next);
    std::copy(next, next + c_next, cur);
  }
}

template <int D, int C, bool W>
void group(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer, int kv_head,
           const KvSeqView& seq, float scale, float* const* out, const int64_t* kv_begin) {
  constexpr int NV = D / 16;  // registers per row
  alignas(64) float qf[kMaxGroupQueries][D];
  alignas(64) uint16_t acc[kMaxGroupQueries][D];  // F16
  alignas(64) float vf[kChunk][D];
  alignas(64) float st[kChunk][kMaxGroupQueries];  // scores, key by key
  float m[kMaxGroupQueries], s_sum[kMaxGroupQueries];
  int ci[kMaxGroupQueries], lo[kMaxGroupQueries];
  int64_t max_kv = 0;
  for (int i = 0; i < n_q; ++i) {
    for (int r = 0; r < NV; ++r) _mm512_store_ps(qf[i] + 16 * r, round_h(_mm512_loadu_ps(q[i] + 16 * r)));
    std::memset(acc[i], 0, sizeof(acc[i]));
    m[i] = -std::numeric_limits<float>::infinity();
    s_sum[i] = 0.0f;
    max_kv = std::max(max_kv, n_kv[i]);
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  const int64_t ks = kv.k_cell_stride(), vs = kv.v_cell_stride();
  const uint16_t* k_base = kv.k(layer, 0) + int64_t(kv_head) * D;
  const uint16_t* v_base = kv.v(layer, 0) + int64_t(kv_head) * D;
  const bool strided = ks > D || vs > D;
  for_chunks<C>(seq, max_kv, [&](int64_t p0, int c, const int64_t* cur, const int64_t* next, int c_next) {
    // Prefetch the next chunk's rows when one head's slice of every cell is a strided walk,
    // which the hardware prefetchers follow poorly. A walk over whole cells (one kv head)
    // is a contiguous stream within each block that they follow well; prefetching it in
    // software only fills the miss queues (Gemma 3 decode of 16 sequences: 5% slower).
    if (strided) prefetch_rows(k_base, ks, v_base, vs, next, c_next, D * 2);
    // Scores of the chunk for every query (those past a query's length go unused); V rows
    // to float.
    for (int j = 0; j < c; ++j) {
      const uint16_t* kr = k_base + cur[j] * ks;
      const uint16_t* vr = v_base + cur[j] * vs;
      __m512 kreg[NV];
#pragma GCC unroll 16
      for (int r = 0; r < NV; ++r) kreg[r] = load_h16<W>(kr + 16 * r);
#pragma GCC unroll 16
      for (int r = 0; r < NV; ++r) _mm512_store_ps(vf[j] + 16 * r, load_h16<W>(vr + 16 * r));
      const __m512 sums = hsum16([&](int i) { return dot16<D>(kreg, qf[i]); }, n_q);
      _mm512_store_ps(st[j], _mm512_mul_ps(sums, vscale));
    }
    for (int i = 0; i < n_q; ++i) {
      ci[i] = int(std::clamp<int64_t>(n_kv[i] - p0, 0, c));
      if (kv_begin) lo[i] = int(std::clamp<int64_t>(kv_begin[i] - p0, 0, c));
    }
    softmax_accumulate<D, W>(st[0], kMaxGroupQueries, c, ci, kv_begin ? lo : nullptr, n_q, m, s_sum, acc,
                          [&](int, int j) { return vf[j]; });
  });
  for (int i = 0; i < n_q; ++i) {
    const float inv = s_sum[i] == 0.0f ? 0.0f : 1.0f / s_sum[i];
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int r = 0; r < NV; ++r) _mm512_storeu_ps(out[i] + 16 * r, _mm512_mul_ps(load_h16<W>(acc[i] + 16 * r), vinv));
  }
}

// attention_seq: per query the float operations of group<D> in the same order. Keys go in
// chunks of 16; per key the cell's heads are visited in query order (contiguous reads),
// then the softmax factors and accumulator updates as in group<D>. When all queries share
// one kv head (prompt units), V rows are converted once per chunk, as in group<D>;
// otherwise each update converts the row of its own head.
template <int D, int C, bool W>
void seq_heads(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale) {
  constexpr int NV = D / 16;
  alignas(64) float qf[kMaxSeqQueries][D];
  alignas(64) uint16_t acc[kMaxSeqQueries][D];  // F16
  alignas(64) float st[kChunk][kMaxSeqQueries];  // scores, key by key
  alignas(64) float vf[kChunk][D];             // V rows of the chunk when all queries share a head
  const uint16_t* vrow[kMaxSeqQueries][kChunk];  // V rows of every query otherwise
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
  const bool shared_v = h_lo == h_hi && n_q > 1;
  const __m512 vscale = _mm512_set1_ps(scale);
  const int64_t ks = kv.k_cell_stride(), vs = kv.v_cell_stride();
  const uint16_t* k_base = kv.k(layer, 0);
  const uint16_t* v_base = kv.v(layer, 0);
  const int span_bytes = (h_hi - h_lo + 1) * D * 2;  // bytes of the heads used, per cell
  // Only a walk over one head's slices of cells with several heads (prompt units) is
  // prefetched in software: it is strided, which the hardware prefetchers follow poorly.
  // Decode units read several heads per cell, blocks of cells in long contiguous runs that
  // they follow well; prefetching those (48 KB per chunk for llama 110m, more than L1)
  // evicted the chunk being worked on and filled the miss queues: 16-sequence decode
  // attention 1.3x slower.
  const bool strided = span_bytes < ks * 2 && h_lo == h_hi;
  for_chunks<C>(seq, max_kv, [&](int64_t p0, int c, const int64_t* cur, const int64_t* next, int c_next) {
    if (strided) prefetch_rows(k_base + int64_t(h_lo) * D, ks, v_base + int64_t(h_lo) * D, vs, next, c_next, span_bytes);
    // Scores of 16 queries at a time; K of a head is converted once for the run of queries
    // of that head. Scores past a query's length go unused.
    for (int j = 0; j < c; ++j) {
      const uint16_t* kcell = k_base + cur[j] * ks;
      const uint16_t* vcell = v_base + cur[j] * vs;
      if (shared_v) {
#pragma GCC unroll 16
        for (int r = 0; r < NV; ++r) _mm512_store_ps(vf[j] + 16 * r, load_h16<W>(vcell + int64_t(h_lo) * D + 16 * r));
      } else {
        for (int i = 0; i < n_q; ++i) vrow[i][j] = vcell + int64_t(qs[i].kv_head) * D;
      }
      __m512 kreg[NV];
      int loaded = -1;
      for (int b = 0; b < n_q; b += 16) {
        const __m512 sums = hsum16(
            [&](int t) {
              const int h = qs[b + t].kv_head;
              if (h != loaded) {
#pragma GCC unroll 16
                for (int r = 0; r < NV; ++r) kreg[r] = load_h16<W>(kcell + int64_t(h) * D + 16 * r);
                loaded = h;
              }
              return dot16<D>(kreg, qf[b + t]);
            },
            std::min(16, n_q - b));
        _mm512_store_ps(st[j] + b, _mm512_mul_ps(sums, vscale));
      }
    }
    for (int i = 0; i < n_q; ++i) ci[i] = int(std::clamp<int64_t>(qs[i].n_kv - p0, 0, c));
    if (shared_v)
      softmax_accumulate<D, W>(st[0], kMaxSeqQueries, c, ci, nullptr, n_q, m, s_sum, acc, [&](int, int j) { return vf[j]; });
    else
      softmax_accumulate<D, W>(st[0], kMaxSeqQueries, c, ci, nullptr, n_q, m, s_sum, acc,
                            [&](int i, int j) { return vrow[i][j]; });
  });
  for (int i = 0; i < n_q; ++i) {
    const float inv = s_sum[i] == 0.0f ? 0.0f : 1.0f / s_sum[i];
    const __m512 vinv = _mm512_set1_ps(inv);
    for (int r = 0; r < NV; ++r) _mm512_storeu_ps(qs[i].out + 16 * r, _mm512_mul_ps(load_h16<W>(acc[i] + 16 * r), vinv));
  }
}

// ---------------------------------------------------------------------------------------
// kTiledF32 (ops.h): per query and tile of 16 key positions, the 16 scores from one
// transposed reduction tree (hsum16 computes tiled_ref::tree16 of each key's 16 lanes of
// fma chains), one rescale when the tile raises the max, the 16 weights from one exp16,
// and the F32 accumulator updated key by key. Each query gets exactly attention_tiled_ref's
// operations.
// tiled: queries of one kv head (prompt units), whose K and V rows of a tile are converted
// to F32 once for all of them; tiled_stream (below): queries of any heads (decode).

// tiled_ref::exp_neg of 16 lanes, the same operations.
TS_ATTN_INLINE __m512 exp16(__m512 x) {
  using namespace tiled_ref;
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpMin), _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpC[0]);
#pragma GCC unroll 8
  for (int k = 1; k < 6; ++k) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpC[k]));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(live, y, n);
}

struct TiledQuery {
  const float* q;
  float* out;
  int64_t begin, end;  // attends to positions [begin, end)
  int32_t kv_head;
};

// The softmax step of one query and tile: scores dots * scale on the lanes `in` (the others
// -inf), the tile's max; when it raises the running max mx, the accumulator (D floats at
// acc) and the lane sums are scaled by exp(mx - max); returns the weights exp(s - mx) (0 off
// `in`), already added to the lane sums.
template <int C>
TS_ATTN_INLINE __m512 tile_weights(__m512 dots, float scale, unsigned in, float& mx, __m512& sums, float* acc) {
  const __m512 s = _mm512_mask_blend_ps(__mmask16(in), _mm512_set1_ps(-std::numeric_limits<float>::infinity()),
                                        _mm512_mul_ps(dots, _mm512_set1_ps(scale)));
  const float m = _mm512_reduce_max_ps(s);
  if (m > mx) {
    const __m512 ms = _mm512_set1_ps(tiled_ref::exp_neg(mx - m));
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) _mm512_store_ps(acc + 16 * c, _mm512_mul_ps(_mm512_load_ps(acc + 16 * c), ms));
    sums = _mm512_mul_ps(sums, ms);
    mx = m;
  }
  const __m512 e = _mm512_maskz_mov_ps(__mmask16(in), exp16(_mm512_sub_ps(s, _mm512_set1_ps(mx))));
  sums = _mm512_add_ps(sums, e);
  return e;
}

// Every query's state zeroed (running max -inf); returns the union [lo, hi) of the queries'
// positions.
template <int C>
std::pair<int64_t, int64_t> tiled_start(const TiledQuery* tq, int n_q, __m512* sums, float* mx, float* acc) {
  int64_t lo = tq[0].begin, hi = 0;
  for (int i = 0; i < n_q; ++i) {
    sums[i] = _mm512_setzero_ps();
    mx[i] = -std::numeric_limits<float>::infinity();
    for (int c = 0; c < C; ++c) _mm512_store_ps(acc + i * 16 * C + 16 * c, _mm512_setzero_ps());
    lo = std::min(lo, tq[i].begin);
    hi = std::max(hi, tq[i].end);
  }
  return {lo, hi};
}

// Every query's output: its accumulator divided by the tree sum of its lane sums.
template <int C>
void tiled_finish(const TiledQuery* tq, int n_q, const __m512* sums, const float* acc) {
  for (int i = 0; i < n_q; ++i) {
    alignas(64) float t[kAttnTile];
    _mm512_store_ps(t, sums[i]);
    const float total = tiled_ref::tree16(t);
    const __m512 inv = _mm512_set1_ps(total == 0.0f ? 0.0f : 1.0f / total);
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
      _mm512_storeu_ps(tq[i].out + 16 * c, _mm512_mul_ps(_mm512_load_ps(acc + i * 16 * C + 16 * c), inv));
  }
}

template <int C>
void tiled(const TiledQuery* tq, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale,
           float* buf) {
  constexpr int L = kAttnTile, D = 16 * C;
  static_assert(L == 16);
  float* const kt = buf;          // [L][D]
  float* const vt = kt + L * D;   // [L][D]
  float* const acc = vt + L * D;  // [n_q][D]
  __m512 sums[kMaxSeqQueries];
  float mx[kMaxSeqQueries];
  const auto [lo, hi] = tiled_start<C>(tq, n_q, sums, mx, acc);
  int64_t cells[L];
  for (int64_t p0 = lo / L * L; p0 < hi; p0 += L) {
    const int64_t a = std::max(p0, lo), b = std::min(p0 + L, hi);
    for (int64_t p = a; p < b; ++p) cells[p - p0] = seq.cell(p);
    for (int64_t p = a; p < b; ++p) {
      const uint16_t* k = kv.k(layer, cells[p - p0]) + int64_t(tq[0].kv_head) * D;
      const uint16_t* v = kv.v(layer, cells[p - p0]) + int64_t(tq[0].kv_head) * D;
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        _mm512_store_ps(kt + (p - p0) * D + 16 * c, load_h16(k + 16 * c));
        _mm512_store_ps(vt + (p - p0) * D + 16 * c, load_h16(v + 16 * c));
      }
    }
    for (int i = 0; i < n_q; ++i) {
      const int64_t qa = std::max(p0, tq[i].begin), qb = std::min(p0 + L, tq[i].end);
      if (qa >= qb) continue;
      const unsigned in = ((1u << (qb - p0)) - 1) & ~((1u << (qa - p0)) - 1);
      __m512 qv[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) qv[c] = _mm512_loadu_ps(tq[i].q + 16 * c);
      const __m512 dots = hsum16(
          [&](int j) {
            __m512 part = _mm512_setzero_ps();
            if (in >> j & 1) {
#pragma GCC unroll 16
              for (int c = 0; c < C; ++c) part = _mm512_fmadd_ps(qv[c], _mm512_load_ps(kt + j * D + 16 * c), part);
            }
            return part;
          },
          L);
      float* ai = acc + i * D;
      const __m512 e = tile_weights<C>(dots, scale, in, mx[i], sums[i], ai);
      __m512 av[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) av[c] = _mm512_load_ps(ai + 16 * c);
      for (unsigned rest = in; rest != 0; rest &= rest - 1) {
        const int j = __builtin_ctz(rest);
        const __m512 ej = _mm512_permutexvar_ps(_mm512_set1_epi32(j), e);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) av[c] = _mm512_fmadd_ps(ej, _mm512_load_ps(vt + j * D + 16 * c), av[c]);
      }
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) _mm512_store_ps(ai + 16 * c, av[c]);
    }
  }
  tiled_finish<C>(tq, n_q, sums, acc);
}

// The same operations per query for queries of any kv heads (decode), the cache read in
// cell order: for each key j of a tile, its dot products with 16 queries at a time reduced
// together (hsum16 over queries: each lane is its query's tree16) into `st`, and,
// interleaved, the value rows of key j of the previous tile into the accumulators (in
// memory); then the softmax step of the tile per query, its 16 scores gathered from `st`. So the
// key and value streams advance together and the accumulators get each tile's values
// before the next tile's rescale, as the definition orders them. Walking each head's 16
// rows of a tile in turn instead streamed the cache at half the speed (attn_bench
// seq/64/decode16).
template <int C>
void tiled_stream(const TiledQuery* tq, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale,
                  float* buf) {
  constexpr int L = kAttnTile, D = 16 * C;
  float* const acc = buf;                     // [n_q][D]
  float* const st = acc + n_q * D;               // [L][kMaxSeqQueries] dot products of a tile
  float* const ev = st + L * kMaxSeqQueries;     // [n_q][L] weights of the previous tile
  const __m512i gather_idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(kMaxSeqQueries));
  __m512 sums[kMaxSeqQueries];
  float mx[kMaxSeqQueries];
  unsigned in[kMaxSeqQueries], in_prev[kMaxSeqQueries] = {}, in_union_prev = 0;
  const auto [lo, hi] = tiled_start<C>(tq, n_q, sums, mx, acc);
  auto add_values = [&](int64_t p, int j) {  // key j (position p) of the previous tile
    if (!(in_union_prev >> j & 1)) return;
    const uint16_t* vrow = kv.v(layer, seq.cell(p));
    for (int i = 0; i < n_q; ++i) {
      if (!(in_prev[i] >> j & 1)) continue;
      const uint16_t* v = vrow + int64_t(tq[i].kv_head) * D;
      const __m512 ej = _mm512_set1_ps(ev[i * L + j]);
      float* ai = acc + i * D;
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c)
        _mm512_store_ps(ai + 16 * c, _mm512_fmadd_ps(ej, load_h16(v + 16 * c), _mm512_load_ps(ai + 16 * c)));
    }
  };
  const int64_t first = lo / L * L;
  for (int64_t p0 = first; p0 < hi + L; p0 += L) {
    const bool scores = p0 < hi;  // the last round only adds the previous tile's values
    for (int i = 0; i < n_q; ++i) {
      const int64_t qa = std::max(p0, tq[i].begin), qb = std::min(p0 + L, tq[i].end);
      in[i] = scores && qa < qb ? ((1u << (qb - p0)) - 1) & ~((1u << (qa - p0)) - 1) : 0u;
    }
    const int ja = scores ? int(std::max(p0, lo) - p0) : L, jb = scores ? int(std::min(p0 + L, hi) - p0) : 0;
    for (int j = 0; j < L; ++j) {
      if (j >= ja && j < jb) {
        // Key j's dot products with 16 queries at a time, reduced together (hsum16 over
        // queries: each lane is its query's tree); the key's row converted once per run of
        // queries of one head.
        const uint16_t* krow = kv.k(layer, seq.cell(p0 + j));
        __m512 kreg[C];
        int loaded = -1;
        for (int b0 = 0; b0 < n_q; b0 += 16) {
          const __m512 dots = hsum16(
              [&](int t) {
                const int i = b0 + t;
                if (!(in[i] >> j & 1)) return _mm512_setzero_ps();
                if (tq[i].kv_head != loaded) {
                  loaded = tq[i].kv_head;
#pragma GCC unroll 16
                  for (int c = 0; c < C; ++c) kreg[c] = load_h16(krow + int64_t(loaded) * D + 16 * c);
                }
                __m512 part = _mm512_setzero_ps();
#pragma GCC unroll 16
                for (int c = 0; c < C; ++c) part = _mm512_fmadd_ps(_mm512_loadu_ps(tq[i].q + 16 * c), kreg[c], part);
                return part;
              },
              std::min(16, n_q - b0));
          _mm512_store_ps(st + j * kMaxSeqQueries + b0, dots);
        }
      }
      if (p0 > first) add_values(p0 - L + j, j);
    }
    if (!scores) break;
    in_union_prev = 0;
    for (int i = 0; i < n_q; ++i) {
      in_prev[i] = in[i];
      in_union_prev |= in[i];
      if (!in[i]) continue;
      const __m512 dots = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), __mmask16(in[i]), gather_idx, st + i, 4);
      _mm512_store_ps(ev + i * L, tile_weights<C>(dots, scale, in[i], mx[i], sums[i], acc + i * D));
    }
  }
  tiled_finish<C>(tq, n_q, sums, acc);
}

// Queries sharing a kv head from this many on convert its rows once per tile (prompt
// units: 16). A decode step's GQA group (Gemma 3: 4 queries, qwen2 0.5b: 7) streams: its
// cache slice comes from DRAM, and Gemma's 16-sequence decode attention took 5.8 ms
// streamed against 6.8 ms converted (attn_bench group/256/decode16/1; the converting kernel
// is faster only with the slice in L2: group/256/decode 40 against 57 us).
constexpr int kTiledShareMin = 8;

template <int C>
void tiled_dispatch(const TiledQuery* tq, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale,
                    float* buf) {
  // Runs of one kv head; shared conversion when every run is long enough.
  bool share = true;
  for (int i = 0; i < n_q;) {
    int e = i + 1;
    while (e < n_q && tq[e].kv_head == tq[i].kv_head) ++e;
    share &= e - i >= kTiledShareMin && e - i <= kMaxGroupQueries;
    i = e;
  }
  if (!share) return tiled_stream<C>(tq, n_q, kv, layer, seq, scale, buf);
  for (int i = 0; i < n_q;) {
    int e = i + 1;
    while (e < n_q && tq[e].kv_head == tq[i].kv_head) ++e;
    tiled<C>(tq + i, e - i, kv, layer, seq, scale, buf);
    i = e;
  }
}

bool tiled_run(const TiledQuery* tq, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale,
               uint16_t* scratch) {
  const int d = kv.shape().head_dim_k;
  if (d != kv.shape().head_dim_v || n_q < 1 || n_q > kMaxSeqQueries) return false;
  float* buf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  switch (d) {
    case 32: tiled_dispatch<2>(tq, n_q, kv, layer, seq, scale, buf); return true;
    case 64: tiled_dispatch<4>(tq, n_q, kv, layer, seq, scale, buf); return true;
    case 80: tiled_dispatch<5>(tq, n_q, kv, layer, seq, scale, buf); return true;
    case 96: tiled_dispatch<6>(tq, n_q, kv, layer, seq, scale, buf); return true;
    case 128: tiled_dispatch<8>(tq, n_q, kv, layer, seq, scale, buf); return true;
    case 256: tiled_dispatch<16>(tq, n_q, kv, layer, seq, scale, buf); return true;
    default: return false;
  }
}

std::atomic<F16Width> g_f16_width{F16Width::kAuto};

// run(integral_constant D, integral_constant W) for head sizes 64, 128 and 256; false
// otherwise. `stream`: a unit that streams the cache (decode), which keeps the 8-lane
// conversions unless told otherwise.
template <typename Run>
bool with_head_size(int d, bool stream, Run&& run) {
  const F16Width w = g_f16_width.load(std::memory_order_relaxed);
  const bool wide = w == F16Width::kAuto ? !stream && !cpu_features().avx512_split : w == F16Width::k512;
  auto at = [&](auto dc) { return wide ? run(dc, std::true_type{}) : run(dc, std::false_type{}); };
  switch (d) {
    case 64: return at(std::integral_constant<int, 64>{});
    case 128: return at(std::integral_constant<int, 128>{});
    case 256: return at(std::integral_constant<int, 256>{});
    default: return false;
  }
}

}  // namespace

void set_attention_f16_width(F16Width w) { g_f16_width.store(w, std::memory_order_relaxed); }

void expf_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, expf16(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 k = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, k, expf16(_mm512_maskz_loadu_ps(k, x + i), k));
  }
}

bool attention_seq_avx512(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                          float scale) {
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  if (dk != dv || n_q < 1 || n_q > kMaxSeqQueries) return false;
  int h_lo = qs[0].kv_head, h_hi = qs[0].kv_head;
  for (int i = 1; i < n_q; ++i) {
    h_lo = std::min(h_lo, qs[i].kv_head);
    h_hi = std::max(h_hi, qs[i].kv_head);
  }
  const bool stream = n_q <= kStreamMaxReuse * (h_hi - h_lo + 1);
  auto run = [&](auto d, auto w) {
    constexpr int D = decltype(d)::value;
    constexpr bool W = decltype(w)::value;
    stream ? seq_heads<D, kStreamChunk, W>(qs, n_q, kv, layer, seq, scale)
           : seq_heads<D, kChunk, W>(qs, n_q, kv, layer, seq, scale);
    return true;
  };
  return with_head_size(dk, stream, run);
}

bool attention_group_avx512(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                            int kv_head, const KvSeqView& seq, float scale, float* const* out,
                            const int64_t* kv_begin) {
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  if (dk != dv) return false;
  const bool stream = n_q <= kStreamMaxReuse;
  auto run = [&](auto d, auto w) {
    constexpr int D = decltype(d)::value;
    constexpr bool W = decltype(w)::value;
    stream ? group<D, kStreamChunk, W>(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, kv_begin)
           : group<D, kChunk, W>(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, kv_begin);
    return true;
  };
  return with_head_size(dk, stream, run);
}

bool attention_tiled_avx512(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                            const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale,
                            float* const* out, uint16_t* scratch) {
  if (n_q < 1 || n_q > kMaxGroupQueries) return false;
  TiledQuery tq[kMaxGroupQueries];
  for (int i = 0; i < n_q; ++i) tq[i] = {q[i], out[i], kv_begin ? kv_begin[i] : 0, n_kv[i], int32_t(kv_head)};
  return tiled_run(tq, n_q, kv, layer, seq, scale, scratch);
}

bool attention_tiled_seq_avx512(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                                float scale, uint16_t* scratch) {
  if (n_q < 1 || n_q > kMaxSeqQueries) return false;
  TiledQuery tq[kMaxSeqQueries];
  for (int i = 0; i < n_q; ++i) tq[i] = {qs[i].q, qs[i].out, 0, qs[i].n_kv, qs[i].kv_head};
  return tiled_run(tq, n_q, kv, layer, seq, scale, scratch);
}

}  // namespace ts::ops::detail
