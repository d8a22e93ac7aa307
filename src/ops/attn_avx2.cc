// AVX2 flash attention of many queries on one kv head (prompt units, GQA groups) for the
// common head sizes (64, 128, 256), bit-identical to attention_head_avx2 (and so to
// llama.cpp's CPU flash attention): every query performs exactly its float operations in
// its order; only the schedule differs. The same schedule as attn_avx512.cc's group, in
// 8-lane registers:
// - keys in chunks of kChunk: the chunk's K and V rows are converted to float once for all
//   queries; per key the dot products of 8 queries go through one transposed reduction
//   tree that adds, per query, the same lane pairs in the same order as score()'s hsum;
// - the softmax factors, 8 queries per register, key after key (the running max and sum
//   are per-lane chains, and expf8 — libm's expf bit for bit — hangs off them), or with
//   libm calls between the updates when there are few queries;
// - the F16 accumulator updates key by key, query by query, so that the chains of all
//   queries overlap.
// llama 110m's 512-token prompt spent 31% of its time in attention on the AVX2 path with
// one query's scores at a time, a libm call per key and each K/V row converted per query
// (attn_bench seq/64: 50-58 M pairs/s against AVX-512's 126 M).
//
// Scalar parts must not be contracted into FMAs (as in ops_avx2.cc).
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "expf_avx2.h"
#include "f16_avx2.h"
#include "ops/ops.h"
#include "ops_internal.h"

namespace ts::ops::detail {
namespace {

#define TS_ATTN_INLINE inline __attribute__((always_inline))

constexpr int kChunk = 16;  // keys per chunk
constexpr int kMaxQ = kMaxSeqQueries;

// score()'s sums a0..a3 over dims [32c, 32c+8), [+8, +16), [+16, +24), [+24, +32) of every
// 32-dim chunk c, returned as (a0 + a2) + (a1 + a3), whose hsum is the score before scale.
template <int D, class K>
TS_ATTN_INLINE __m256 dot8(K&& k, const float* q) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
#pragma GCC unroll 8
  for (int c = 0; c < D / 32; ++c) {
    a0 = _mm256_fmadd_ps(k(4 * c), _mm256_load_ps(q + 32 * c), a0);
    a1 = _mm256_fmadd_ps(k(4 * c + 1), _mm256_load_ps(q + 32 * c + 8), a1);
    a2 = _mm256_fmadd_ps(k(4 * c + 2), _mm256_load_ps(q + 32 * c + 16), a2);
    a3 = _mm256_fmadd_ps(k(4 * c + 3), _mm256_load_ps(q + 32 * c + 24), a3);
  }
  return _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
}

// The reduction tree over 8 vectors t(0..7). hsum(v) adds u_i = v_i + v_(i+4), then w_i =
// u_i + u_(i+2) (i < 2), then w_0 + w_1; each level here does so for two registers' worth.
// Level 1: [u(a) | u(b)].
TS_ATTN_INLINE __m256 sum_u(__m256 a, __m256 b) {
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}
// Level 2: [w(a) w(c) | w(b) w(d)] from [u(a) | u(b)] and [u(c) | u(d)].
TS_ATTN_INLINE __m256 sum_w(__m256 ab, __m256 cd) {
  return _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
}
// Level 3: [a c e g | b d f h] from [w(a) w(c) | w(b) w(d)] and [w(e) w(g) | w(f) w(h)].
TS_ATTN_INLINE __m256 sum_final(__m256 p, __m256 q) {
  return _mm256_add_ps(_mm256_shuffle_ps(p, q, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm256_shuffle_ps(p, q, _MM_SHUFFLE(3, 1, 3, 1)));
}
// The 8 horizontal sums of t(0..n-1) (zero vectors for n..7), lane i holding t(i)'s.
template <typename T>
TS_ATTN_INLINE __m256 hsum8(T&& t, int n) {
  auto in = [&](int i) { return i < n ? t(i) : _mm256_setzero_ps(); };
  const __m256 u04 = sum_u(in(0), in(4));
  const __m256 u15 = sum_u(in(1), in(5));
  const __m256 p = sum_w(u04, u15);
  const __m256 u26 = sum_u(in(2), in(6));
  const __m256 u37 = sum_u(in(3), in(7));
  return sum_final(p, sum_w(u26, u37));
}

// acc = f16(v * vsc + acc), the accumulator first rescaled (f16(acc * ms)) when the query's
// max moved at this key: scale_h then update of ops_avx2.cc, the rounding of the store
// between them kept in a register.
template <int D>
TS_ATTN_INLINE void update_acc(uint16_t* acc, const float* v, float vsc, bool moved, float ms) {
  const __m256 vv = _mm256_set1_ps(vsc);
  if (moved) {
    const __m256 vm = _mm256_set1_ps(ms);
#pragma GCC unroll 32
    for (int r = 0; r < D / 8; ++r) {
      const __m256 a = round_h8(_mm256_mul_ps(load_h8(acc + 8 * r), vm));
      store_h8(acc + 8 * r, _mm256_fmadd_ps(_mm256_load_ps(v + 8 * r), vv, a));
    }
  } else {
#pragma GCC unroll 32
    for (int r = 0; r < D / 8; ++r)
      store_h8(acc + 8 * r, _mm256_fmadd_ps(_mm256_load_ps(v + 8 * r), vv, load_h8(acc + 8 * r)));
  }
}

// The per-query state of a group.
template <int D>
struct State {
  alignas(32) float qf[kMaxQ][D];      // queries rounded to F16
  alignas(32) uint16_t acc[kMaxQ][D];  // F16 accumulators
  alignas(32) float vf[kChunk][D];     // the chunk's V rows
  alignas(32) float st[kChunk][kMaxQ];  // scores, key by key
  alignas(32) float m[kMaxQ], s_sum[kMaxQ];
  alignas(32) int ci[kMaxQ], lo[kMaxQ];  // query i takes keys [lo[i], ci[i]) of the chunk
};

// Softmax factors of keys [0, c), 8 queries per register, key after key; then the updates.
template <int D>
void accumulate_vector(State<D>& s, int c, int n_q, bool windows) {
  alignas(32) float f_ms[kChunk][kMaxQ], f_vsc[kChunk][kMaxQ];
  uint32_t moved[kChunk] = {};
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int b = 0; b < n_q; b += 8) {
    const int lanes = n_q - b >= 8 ? 0xff : (1 << (n_q - b)) - 1;
    __m256 mv = _mm256_load_ps(s.m + b), sv = _mm256_load_ps(s.s_sum + b);
    const __m256i cv = _mm256_load_si256(reinterpret_cast<const __m256i*>(s.ci + b));
    const __m256i lv = windows ? _mm256_load_si256(reinterpret_cast<const __m256i*>(s.lo + b)) : _mm256_setzero_si256();
    for (int j = 0; j < c; ++j) {
      const __m256i jv = _mm256_set1_epi32(j);
      const __m256 before_end = _mm256_castsi256_ps(_mm256_cmpgt_epi32(cv, jv));
      const int be = lanes & _mm256_movemask_ps(before_end);
      if (be == 0) break;  // no query takes this key, nor any later one
      const __m256 act = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(lv, jv)), before_end);
      const int am = lanes & _mm256_movemask_ps(act);
      if (am == 0) continue;  // the queries taking later keys start after this one
      const __m256 sj = _mm256_load_ps(s.st[j] + b);
      const __m256 mov = _mm256_and_ps(act, _mm256_cmp_ps(sj, mv, _CMP_GT_OQ));  // sj > m
      // moved: ms = exp(m - sj), m = sj; else vsc = exp(sj - m).
      const __m256 e = expf8(_mm256_blendv_ps(_mm256_sub_ps(sj, mv), _mm256_sub_ps(mv, sj), mov), am);
      const __m256 ms = _mm256_blendv_ps(one, e, mov);
      const __m256 vsc = _mm256_blendv_ps(e, one, mov);
      mv = _mm256_blendv_ps(mv, sj, mov);
      sv = _mm256_blendv_ps(sv, _mm256_add_ps(_mm256_mul_ps(sv, ms), vsc), act);  // s_sum * ms + vsc
      _mm256_store_ps(f_ms[j] + b, ms);
      _mm256_store_ps(f_vsc[j] + b, vsc);
      moved[j] |= uint32_t(_mm256_movemask_ps(mov) & lanes) << b;
    }
    _mm256_store_ps(s.m + b, mv);
    _mm256_store_ps(s.s_sum + b, sv);
  }
  for (int j = 0; j < c; ++j)
    for (int i = 0; i < n_q; ++i) {
      if (j >= s.ci[i] || j < s.lo[i]) continue;
      update_acc<D>(s.acc[i], s.vf[j], f_vsc[j][i], moved[j] >> i & 1u, f_ms[j][i]);
    }
}

// The same with libm calls between the updates (few queries: a register of exps per key
// would be mostly idle lanes). The factors of key j + 1 come after the update of key j, so
// that no update waits for its exp call.
template <int D>
void accumulate_scalar(State<D>& s, int c, int n_q) {
  float f_ms[kMaxQ], f_vsc[kMaxQ];
  bool f_moved[kMaxQ];
  auto factors = [&](int i, int j) {
    const float sj = s.st[j][i];
    float ms = 1.0f, vsc = 1.0f;
    const bool moved = sj > s.m[i];
    if (moved) {
      ms = std::exp(s.m[i] - sj);
      s.m[i] = sj;
    } else {
      vsc = std::exp(sj - s.m[i]);
    }
    s.s_sum[i] = s.s_sum[i] * ms + vsc;
    f_ms[i] = ms;
    f_vsc[i] = vsc;
    f_moved[i] = moved;
  };
  for (int i = 0; i < n_q; ++i)
    if (s.lo[i] < s.ci[i]) factors(i, s.lo[i]);
  for (int j = 0; j < c; ++j)
    for (int i = 0; i < n_q; ++i) {
      if (j >= s.ci[i] || j < s.lo[i]) continue;
      update_acc<D>(s.acc[i], s.vf[j], f_vsc[i], f_moved[i], f_ms[i]);
      if (j + 1 < s.ci[i]) factors(i, j + 1);
    }
}

// Requests a chunk's K and V rows (one head's slice of each cell) into L1: one head of
// cells holding several is a strided walk, which the hardware prefetchers follow poorly.
inline void prefetch_rows(const uint16_t* k_base, const uint16_t* v_base, int64_t ks, int64_t vs, const int64_t* cells,
                          int n, int n_bytes) {
  for (int j = 0; j < n; ++j)
    for (int off = 0; off < n_bytes; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(k_base + cells[j] * ks) + off, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(v_base + cells[j] * vs) + off, _MM_HINT_T0);
    }
}

template <int D>
void group(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer, int kv_head,
           const KvSeqView& seq, float scale, float* const* out, const int64_t* kv_begin) {
  constexpr int NV = D / 8;  // registers per row
  State<D> s;
  int64_t max_kv = 0;
  for (int i = 0; i < n_q; ++i) {
    for (int r = 0; r < NV; ++r) _mm256_store_ps(s.qf[i] + 8 * r, round_h8(_mm256_loadu_ps(q[i] + 8 * r)));
    std::memset(s.acc[i], 0, sizeof(s.acc[i]));
    s.m[i] = -std::numeric_limits<float>::infinity();
    s.s_sum[i] = 0.0f;
    s.lo[i] = 0;
    max_kv = std::max(max_kv, n_kv[i]);
  }
  for (int i = n_q; i < (n_q + 7) / 8 * 8; ++i) {  // lanes of no query
    s.m[i] = s.s_sum[i] = 0.0f;
    s.ci[i] = s.lo[i] = 0;
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  const int64_t ks = kv.k_cell_stride(), vs = kv.v_cell_stride();
  const uint16_t* k_base = kv.k(layer, 0) + int64_t(kv_head) * D;
  const uint16_t* v_base = kv.v(layer, 0) + int64_t(kv_head) * D;
  const bool strided = ks > D || vs > D;
  const bool vector = D <= 128 && n_q >= 8;
  int64_t cells[2][kChunk];
  auto cells_of = [&](int64_t p, int n, int64_t* out_cells) {
    int64_t b = p / seq.block_size, o = p % seq.block_size;
    for (int j = 0; j < n; ++j) {
      out_cells[j] = int64_t(seq.blocks[size_t(b)]) * seq.block_size + o;
      if (++o == seq.block_size) {
        o = 0;
        ++b;
      }
    }
  };
  cells_of(0, int(std::min<int64_t>(kChunk, max_kv)), cells[0]);
  for (int64_t p0 = 0, k = 0; p0 < max_kv; p0 += kChunk, k ^= 1) {
    const int c = int(std::min<int64_t>(kChunk, max_kv - p0));
    const int c_next = int(std::clamp<int64_t>(max_kv - p0 - kChunk, 0, kChunk));
    const int64_t* cur = cells[k];
    cells_of(p0 + kChunk, c_next, cells[k ^ 1]);
    if (strided) prefetch_rows(k_base, v_base, ks, vs, cells[k ^ 1], c_next, D * 2);
    // Scores of the chunk for every query (those past a query's keys go unused); V rows to
    // float. A K row of up to 64 dims stays in registers across the queries.
    for (int j = 0; j < c; ++j) {
      const uint16_t* kr = k_base + cur[j] * ks;
      const uint16_t* vr = v_base + cur[j] * vs;
#pragma GCC unroll 32
      for (int r = 0; r < NV; ++r) _mm256_store_ps(s.vf[j] + 8 * r, load_h8(vr + 8 * r));
      if constexpr (D <= 64) {
        __m256 kreg[NV];
#pragma GCC unroll 8
        for (int r = 0; r < NV; ++r) kreg[r] = load_h8(kr + 8 * r);
        for (int b = 0; b < n_q; b += 8) {
          const __m256 sums = hsum8([&](int t) { return dot8<D>([&](int r) { return kreg[r]; }, s.qf[b + t]); },
                                    std::min(8, n_q - b));
          _mm256_store_ps(s.st[j] + b, _mm256_mul_ps(sums, vscale));
        }
      } else {
        alignas(32) float kf[D];
#pragma GCC unroll 32
        for (int r = 0; r < NV; ++r) _mm256_store_ps(kf + 8 * r, load_h8(kr + 8 * r));
        for (int b = 0; b < n_q; b += 8) {
          const __m256 sums = hsum8(
              [&](int t) { return dot8<D>([&](int r) { return _mm256_load_ps(kf + 8 * r); }, s.qf[b + t]); },
              std::min(8, n_q - b));
          _mm256_store_ps(s.st[j] + b, _mm256_mul_ps(sums, vscale));
        }
      }
    }
    for (int i = 0; i < n_q; ++i) {
      s.ci[i] = int(std::clamp<int64_t>(n_kv[i] - p0, 0, c));
      if (kv_begin) s.lo[i] = int(std::clamp<int64_t>(kv_begin[i] - p0, 0, c));
    }
    if (vector)
      accumulate_vector<D>(s, c, n_q, kv_begin != nullptr);
    else
      accumulate_scalar<D>(s, c, n_q);
  }
  for (int i = 0; i < n_q; ++i) {
    const float inv = s.s_sum[i] == 0.0f ? 0.0f : 1.0f / s.s_sum[i];
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int r = 0; r < NV; ++r) _mm256_storeu_ps(out[i] + 8 * r, _mm256_mul_ps(load_h8(s.acc[i] + 8 * r), vinv));
  }
}

}  // namespace

bool attention_group_avx2_wide(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                               int kv_head, const KvSeqView& seq, float scale, float* const* out,
                               const int64_t* kv_begin) {
  if (n_q < 1 || n_q > kMaxQ) return false;
  const int dk = kv.shape().head_dim_k;
  if (dk != kv.shape().head_dim_v) return false;
  switch (dk) {
    case 64:
      group<64>(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, kv_begin);
      return true;
    case 128:
      group<128>(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, kv_begin);
      return true;
    case 256:
      group<256>(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, kv_begin);
      return true;
    default:
      return false;
  }
}

void expf_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, expf8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float xs[8] = {}, ys[8];
    std::memcpy(xs, x + i, size_t(n - i) * sizeof(float));
    _mm256_store_ps(ys, expf8(_mm256_load_ps(xs)));
    std::memcpy(y + i, ys, size_t(n - i) * sizeof(float));
  }
}

}  // namespace ts::ops::detail
