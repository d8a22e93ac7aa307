// AVX-512 (F/BW/VL + VNNI) panel kernels of the quantized types (layout in panel.h).
//
// One 32-bit lane per weight row: vpdpbusd multiplies 4 unsigned levels of each of 16 rows
// with 4 signed activation levels broadcast to every lane, so a 64-byte load feeds 64
// multiply-adds with no shuffles and no horizontal sums. Offsets (Q4_0's q - 8 and so on)
// are folded in by starting the integer sum at -offset * sum(x), precomputed per token
// (act.h). Q8_0's signed levels are made unsigned by flipping the sign bit (q + 128).
// The levels are unpacked once per block and reused for a tile of T tokens.
//
// The float arithmetic per (row, token) is exactly the scalar kernels' (kernels_scalar.cc):
// integer sums are exact in any order, then the same multiplies and fused multiply-adds
// in block order — so results are bit-identical to every other path.

// GCC 12's AVX-512 intrinsics build on self-initialized "undefined" vectors and warn
// about them at every inlined use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "act.h"
#include "gemm_avx512.h"
#include "panel.h"
#include "prefetch.h"
#include "quant_blocks.h"

namespace ts::kernels::avx512 {
namespace {

#define TS_INLINE inline __attribute__((always_inline))
// Loops over registers (tokens, rows, words of a block) must be unrolled so that arrays of
// vectors stay in registers.
#define TS_UNROLL _Pragma("GCC unroll 16")

TS_INLINE __m512i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
TS_INLINE __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }
TS_INLINE __m512 load_half16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
TS_INLINE __mmask64 load_mask(const uint8_t* p) {
  uint64_t m;
  std::memcpy(&m, p, 8);
  return _cvtu64_mask64(m);
}
TS_INLINE __m512i dpbusd(__m512i acc, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(acc, u, s); }

TS_INLINE void store_rows(float* y, __m512 v, int n_rows) {
  _mm512_mask_storeu_ps(y, __mmask16((1u << n_rows) - 1), v);
}

// Per-token pointers of a tile.
template <int T>
struct Tokens {
  const int8_t* q[T];
  const float* d[T];
  const int32_t* corr[T];
  const float* s[T];
  const int16_t* xs[T];
  Tokens(const Act& a, int t0) {
    TS_UNROLL
    for (int t = 0; t < T; ++t) {
      q[t] = a.at(a.qs, t0 + t);
      d[t] = a.at(a.d, t0 + t);
      corr[t] = a.at(a.corr, t0 + t);
      s[t] = a.at(a.s, t0 + t);
      xs[t] = a.at(a.xs, t0 + t);
    }
  }
};

// ---------------------------------------------------------------------------------------
// 32-element blocks: Q8_0, Q4_0, Q5_0 (offset levels), Q4_1, Q5_1 (levels + min).

// The unsigned levels of one block are 8 vectors: lo[h] holds columns 4h..4h+3 of each
// row, hi[h] columns 16+4h.. (Q8_0: w[j] holds columns 4j..4j+3, stored in lo[0..3],
// hi[0..3]). unpack32_pair makes lo[h] and hi[h], unpack32 all 8.
template <DType W>
TS_INLINE void unpack32_pair(const uint8_t* g, int h, __m512i& lo, __m512i& hi) {
  if constexpr (W == DType::Q8_0) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    lo = _mm512_xor_si512(load512(g + 64 * h), flip);
    hi = _mm512_xor_si512(load512(g + 64 * (h + 4)), flip);
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = load512(g + 64 * h);
    lo = _mm512_and_si512(v, m4);
    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if constexpr (W == DType::Q5_0 || W == DType::Q5_1) {
      const __m512i b4 = _mm512_set1_epi8(0x10);
      const uint8_t* hb = g + pq5_0::kHbit + 16 * h;
      lo = _mm512_mask_add_epi8(lo, load_mask(hb), lo, b4);
      hi = _mm512_mask_add_epi8(hi, load_mask(hb + 8), hi, b4);
    }
  }
}

template <DType W>
TS_INLINE void unpack32(const uint8_t* g, __m512i lo[4], __m512i hi[4]) {
  TS_UNROLL
  for (int h = 0; h < 4; ++h) unpack32_pair<W>(g, h, lo[h], hi[h]);
}

// Decode (few tokens) streams the panels at DRAM speed. No software prefetch here: the
// panels of a matrix are one sequential stream, which the hardware prefetchers follow, and
// prefetching 2 or 8 blocks ahead into L1 or L2 on top of them measured 10-25% slower for
// Q8_0 and Q5_0 (Gemma 3 270M's output projection and Q/K/gate/up; 4 KiB and 2 MiB pages,
// 1 and 2 threads). The K-quant kernels below do prefetch: their groups are larger and
// their loops longer, and there it measured faster. So do the tiles of several tokens
// (tile32x), which are compute bound: they request the next panel while they run.

template <DType W, int T>
void tile32(const uint8_t* panel, int64_t nb, const Act& act, int t0, float* y, int64_t ys, int n_rows) {
  constexpr int kG = group_bytes32<W>();
  const Tokens<T> tk(act, t0);
  __m512 acc[T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = panel + b * kG;
    __m512i lo[4], hi[4];
    unpack32<W>(g, lo, hi);
    const __m512 dw = load_half16(g + d_offset32<W>());
    // Token-inner loops: T independent vpdpbusd chains interleaved, so the latency of each
    // chain hides behind the others; with few tokens (decode) the low and high halves get
    // chains of their own (the integer sum is the same in any order).
    constexpr int kC = T <= 2 ? 2 : 1;
    __m512i s[kC][T];
    TS_UNROLL
    for (int t = 0; t < T; ++t) {
      s[0][t] = has_min32<W>() ? _mm512_setzero_si512() : _mm512_set1_epi32(tk.corr[t][b]);
      if constexpr (kC == 2) s[kC - 1][t] = _mm512_setzero_si512();
    }
    TS_UNROLL
    for (int j = 0; j < 4; ++j) {
      TS_UNROLL
      for (int t = 0; t < T; ++t) s[0][t] = dpbusd(s[0][t], lo[j], bcast32(tk.q[t] + 32 * b + 4 * j));
    }
    TS_UNROLL
    for (int j = 0; j < 4; ++j) {
      TS_UNROLL
      for (int t = 0; t < T; ++t)
        s[kC - 1][t] = dpbusd(s[kC - 1][t], hi[j], bcast32(tk.q[t] + 32 * b + 16 + 4 * j));
    }
    if constexpr (kC == 2) {
      TS_UNROLL
      for (int t = 0; t < T; ++t) s[0][t] = _mm512_add_epi32(s[0][t], s[1][t]);
    }
    TS_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m512 dxw = _mm512_mul_ps(dw, _mm512_set1_ps(tk.d[t][b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0][t]), dxw, acc[t]);
      if constexpr (has_min32<W>()) {
        constexpr int kM = m_offset32<W>();
        acc[t] = _mm512_fmadd_ps(load_half16(g + kM), _mm512_set1_ps(tk.s[t][b]), acc[t]);
      }
    }
  }
  TS_UNROLL
  for (int t = 0; t < T; ++t) store_rows(y + (t0 + t) * ys, acc[t], n_rows);
}

// Unpacked levels of a panel (the 8 vectors of unpack32 per block), so that the tiles of
// many tokens unpack each block once instead of once per tile.
constexpr int kPreBytes = kUnpacked32;

template <DType W>
void unpack_panel(const uint8_t* panel, int64_t nb, uint8_t* out) {
  constexpr int kG = group_bytes32<W>();
  const int64_t next = nb * kG;
  for (int64_t b = 0; b < nb; ++b, panel += kG, out += kPreBytes) {
    prefetch_group_l2<kG>(panel + next);
    TS_UNROLL
    for (int h = 0; h < 4; ++h) {
      __m512i lo, hi;
      unpack32_pair<W>(panel, h, lo, hi);
      _mm512_store_si512(out + 64 * h, lo);
      _mm512_store_si512(out + 64 * (h + 4), hi);
    }
  }
}

// One block of a tile of T tokens (all addresses fixed offsets from x): the integer sums,
// then acc[t] += float(sum) * (dw * dx) as in tile32.
template <DType W, int T, bool kPre>
TS_INLINE void block32x(const uint8_t* g, const uint8_t* pre, const uint8_t* x, __m512 dw, __m512* acc) {
  constexpr int kD = Act::kTileD, kAux = Act::kTileAux;
  // With few tokens (decode) the low and high halves get dependency chains of their own.
  constexpr int kC = T <= 2 ? 2 : 1;
  __m512i s[kC][T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) {
    s[0][t] = has_min32<W>() ? _mm512_setzero_si512() : bcast32(x + kAux + 4 * t);
    if constexpr (kC == 2) s[kC - 1][t] = _mm512_setzero_si512();
  }
  TS_UNROLL
  for (int h = 0; h < 4; ++h) {
    __m512i lo, hi;
    if constexpr (kPre) {
      lo = load512(pre + 64 * h);
      hi = load512(pre + 64 * (h + 4));
    } else {
      unpack32_pair<W>(g, h, lo, hi);
    }
    TS_UNROLL
    for (int t = 0; t < T; ++t) s[0][t] = dpbusd(s[0][t], lo, bcast32(x + 32 * t + 4 * h));
    TS_UNROLL
    for (int t = 0; t < T; ++t) s[kC - 1][t] = dpbusd(s[kC - 1][t], hi, bcast32(x + 32 * t + 16 + 4 * h));
  }
  if constexpr (kC == 2) {
    TS_UNROLL
    for (int t = 0; t < T; ++t) s[0][t] = _mm512_add_epi32(s[0][t], s[1][t]);
  }
  TS_UNROLL
  for (int t = 0; t < T; ++t) {
    float dx;
    std::memcpy(&dx, x + kD + 4 * t, 4);
    const __m512 dxw = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[0][t]), dxw, acc[t]);
    if constexpr (has_min32<W>()) {
      constexpr int kM = m_offset32<W>();
      float sx;
      std::memcpy(&sx, x + kAux + 4 * t, 4);
      acc[t] = _mm512_fmadd_ps(load_half16(g + kM), _mm512_set1_ps(sx), acc[t]);
    }
  }
}

// tile32 on the interleaved activations of Act::tiles, for several tokens: x points at the
// record of the tile's group and block 0, the tile's tokens being slots 0..T-1. All
// activation addresses are fixed offsets from x (one register, one add per block), where
// tile32 keeps a pointer per token and array, more than there are registers, and spills.
// The levels are unpacked a pair (lo[h], hi[h]) at a time, so only two are live, which
// leaves registers for 10 tokens. kPre: the levels come unpacked from `pre` (unpack_panel);
// kPf: prefetch the next panel (the panel's first tile).
// The loop every interleaved tile shares: one float accumulator per token over the
// panel's groups of kG bytes, with the activation records (kRec bytes per group) and the
// unpacked levels (kPreStep bytes per group, 0 without them) advancing in step, and the
// next panel prefetched first when kPf. group(g, pre, x, acc) adds one group; then the
// rows are stored.
template <int T, int kG, int kRec, int kPreStep, bool kPf, typename Group>
TS_INLINE void tile_loop(const uint8_t* panel, const uint8_t* pre, int64_t nb, const uint8_t* x, int t0, float* y,
                         int64_t ys, int n_rows, const Group& group) {
  __m512 acc[T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  const uint8_t* const end = panel + nb * kG;
  for (const uint8_t* g = panel; g != end; g += kG, x += kRec, pre += kPreStep) {
    if constexpr (kPf) prefetch_group_l2<kG>(g + nb * kG);
    group(g, pre, x, acc);
  }
  TS_UNROLL
  for (int t = 0; t < T; ++t) store_rows(y + (t0 + t) * ys, acc[t], n_rows);
}

template <DType W, int T, bool kPre, bool kPf>
void tile32x(const uint8_t* panel, const uint8_t* pre, int64_t nb, const uint8_t* x, int t0, float* y, int64_t ys,
             int n_rows) {
  static_assert(T <= Act::kTileTokens);
  constexpr int kG = group_bytes32<W>();
  tile_loop<T, kG, Act::kTileBlockBytes, kPre ? kPreBytes : 0, kPf>(
      panel, pre, nb, x, t0, y, ys, n_rows,
      [](const uint8_t* g, const uint8_t* p, const uint8_t* xr, __m512* acc) __attribute__((always_inline)) {
        block32x<W, T, kPre>(g, p, xr, load_half16(g + d_offset32<W>()), acc);
      });
}

// Tokens [t0, t0 + nt) of one panel in tiles of T tokens, then one tile of the remainder,
// from activation records `recs` (groups of G tokens, `rec` bytes per group and block, nb
// blocks; t0 is the first token of a group). tile.operator()<T, kPre, kPf>(x, t) runs one
// tile of T tokens from token t with records x. pre: the unpacked panel, or null; first:
// no tile of this panel has run yet (the first one prefetches the next panel).
template <int T, int G, typename Tile>
void run_tiles(const Tile& tile, const uint8_t* recs, int64_t nb, int64_t rec, const uint8_t* pre, int t0, int nt,
               bool first = true) {
  if constexpr (T > 0) {
    for (; nt >= T; t0 += T, nt -= T, first = false) {
      const uint8_t* x = recs + int64_t(t0 / G) * nb * rec;
      if (pre)
        tile.template operator()<T, true, false>(x, t0);
      else if (first)
        tile.template operator()<T, false, true>(x, t0);
      else
        tile.template operator()<T, false, false>(x, t0);
    }
    if (nt > 0) run_tiles<T - 1, G>(tile, recs, nb, rec, pre, t0, nt, first);
  }
}

// ---------------------------------------------------------------------------------------
// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins.

template <DType W, int T>
void tile_kx(const uint8_t* panel, int64_t nsb, const Act& act, int t0, float* y, int64_t ys, int n_rows) {
  constexpr bool kQ5 = W == DType::Q5_K;
  constexpr int kG = kQ5 ? pq5_k::kBytes : pq4_k::kBytes;
  constexpr int kSc = kQ5 ? pq5_k::kSc : pq4_k::kSc;
  constexpr int kMn = kQ5 ? pq5_k::kMn : pq4_k::kMn;
  constexpr int kD = kQ5 ? pq5_k::kD : pq4_k::kD;
  constexpr int kDmin = kQ5 ? pq5_k::kDmin : pq4_k::kDmin;
  const Tokens<T> tk(act, t0);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i b4 = _mm512_set1_epi8(0x10);
  __m512 acc[T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* g = panel + sb * kG;
    __m512i isum[T];
    TS_UNROLL
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) {
      prefetch_part<kG, 4>(g + kG, c);  // the next group, a quarter per chunk (prefetch.h)
      __m512i a[T], bb[T];
      TS_UNROLL
      for (int t = 0; t < T; ++t) a[t] = bb[t] = _mm512_setzero_si512();
      TS_UNROLL
      for (int h = 0; h < 8; ++h) {
        const __m512i v = load512(g + (kQ5 ? pq5_k::nib(c, h) : pq4_k::nib(c, h)));
        __m512i lo = _mm512_and_si512(v, m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (kQ5) {
          const uint8_t* hb = g + pq5_k::hbit(c, h, 0);
          lo = _mm512_mask_add_epi8(lo, load_mask(hb), lo, b4);
          hi = _mm512_mask_add_epi8(hi, load_mask(hb + 8), hi, b4);
        }
        TS_UNROLL
        for (int t = 0; t < T; ++t) {
          const int8_t* x = tk.q[t] + 256 * sb + 64 * c + 4 * h;
          a[t] = dpbusd(a[t], lo, bcast32(x));
          bb[t] = dpbusd(bb[t], hi, bcast32(x + 32));
        }
      }
      const __m512i sca =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kSc + 32 * c)));
      const __m512i scb =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kSc + 32 * c + 16)));
      TS_UNROLL
      for (int t = 0; t < T; ++t)
        isum[t] = _mm512_add_epi32(
            isum[t], _mm512_add_epi32(_mm512_mullo_epi32(a[t], sca), _mm512_mullo_epi32(bb[t], scb)));
    }
    __m512i mins[4];
    TS_UNROLL
    for (int p = 0; p < 4; ++p)
      mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kMn + 32 * p)));
    const __m512 d = load_half16(g + kD), dmin = load_half16(g + kDmin);
    TS_UNROLL
    for (int t = 0; t < T; ++t) {
      __m512i imin = _mm512_setzero_si512();
      TS_UNROLL
      for (int p = 0; p < 4; ++p)
        imin = _mm512_dpwssd_epi32(imin, mins[p], bcast32(tk.xs[t] + 8 * sb + 2 * p));
      const __m512 dx = _mm512_set1_ps(tk.d[t][sb]);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, dx), acc[t]);
    }
  }
  TS_UNROLL
  for (int t = 0; t < T; ++t) store_rows(y + (t0 + t) * ys, acc[t], n_rows);
}

// ---------------------------------------------------------------------------------------
// Q6_K: 16 sub-blocks of 16 with int8 scales, levels q - 32.

template <int T>
void tile_q6_k(const uint8_t* panel, int64_t nsb, const Act& act, int t0, float* y, int64_t ys, int n_rows) {
  const Tokens<T> tk(act, t0);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  __m512 acc[T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const uint8_t* g = panel + sb * pq6_k::kBytes;
    __m512i isum[T];
    TS_UNROLL
    for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
    for (int n = 0; n < 2; ++n) {
      for (int q = 0; q < 2; ++q) {
        prefetch_part<pq6_k::kBytes, 4>(g + pq6_k::kBytes, 2 * n + q);  // the next group (prefetch.h)
        const int idx0 = (2 * n + q) * 8;
        for (int hh = 0; hh < 2; ++hh) {
          const int jl = 8 * n + 2 * q + hh, jh = jl + 4;  // sub-blocks of the low/high nibbles
          __m512i a[T], bb[T];
          TS_UNROLL
          for (int t = 0; t < T; ++t) {
            a[t] = _mm512_set1_epi32(tk.corr[t][16 * sb + jl]);
            bb[t] = _mm512_set1_epi32(tk.corr[t][16 * sb + jh]);
          }
          TS_UNROLL
          for (int h = 4 * hh; h < 4 * hh + 4; h += 2) {
            // Two nibble vectors share one vector of top bits; (x & 0x0F) | top in one
            // vpternlogd (0xEC: (A & C) | B).
            const int idx = idx0 + h;
            const __m512i top = load512(g + pq6_k::top(idx));
            const __m512i va = load512(g + pq6_k::nib(idx)), vb = load512(g + pq6_k::nib(idx + 1));
            __m512i lv[2], hv[2];
            lv[0] = _mm512_ternarylogic_epi32(va, _mm512_and_si512(_mm512_slli_epi16(top, 4), m30), m4, 0xEC);
            hv[0] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(va, 4),
                                              _mm512_and_si512(_mm512_slli_epi16(top, 2), m30), m4, 0xEC);
            lv[1] = _mm512_ternarylogic_epi32(vb, _mm512_and_si512(top, m30), m4, 0xEC);
            hv[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(vb, 4),
                                              _mm512_and_si512(_mm512_srli_epi16(top, 2), m30), m4, 0xEC);
            TS_UNROLL
            for (int e = 0; e < 2; ++e) {
              TS_UNROLL
              for (int t = 0; t < T; ++t) {
                const int8_t* x = tk.q[t] + 256 * sb + 128 * n + 32 * q + 4 * (h + e);
                a[t] = dpbusd(a[t], lv[e], bcast32(x));
                bb[t] = dpbusd(bb[t], hv[e], bcast32(x + 64));
              }
            }
          }
          const __m512i scl = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + pq6_k::kSc + 16 * jl)));
          const __m512i sch = _mm512_cvtepi8_epi32(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + pq6_k::kSc + 16 * jh)));
          TS_UNROLL
          for (int t = 0; t < T; ++t)
            isum[t] = _mm512_add_epi32(
                isum[t], _mm512_add_epi32(_mm512_mullo_epi32(a[t], scl), _mm512_mullo_epi32(bb[t], sch)));
        }
      }
    }
    const __m512 d = load_half16(g + pq6_k::kD);
    TS_UNROLL
    for (int t = 0; t < T; ++t)
      acc[t] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, _mm512_set1_ps(tk.d[t][sb])), acc[t]);
  }
  TS_UNROLL
  for (int t = 0; t < T; ++t) store_rows(y + (t0 + t) * ys, acc[t], n_rows);
}

// ---------------------------------------------------------------------------------------
// K-quant tiles of up to Act::kKTileTokens tokens on the interleaved Q8_K activations
// (Act::ktiles): x points at the record of the tile's group and 256-block, the tokens
// being slots 0..T-1, so every activation operand is a fixed offset from one register
// (tile_kx and tile_q6_k keep a pointer per token and array, which limits them to 4
// tokens). One sub-block at a time: per token only its sub-block sum, its block sum and
// its accumulator are live. The integer sums are the same exact sums in another order, and
// the float operations per (row, token) are tile_kx's / tile_q6_k's.

// The 16 level vectors of a 64-column chunk c of a Q4_K/Q5_K group: half 0 the low
// nibbles (sub-block 2c), half 1 the high ones (2c + 1); h = 4-column word.
template <DType W>
TS_INLINE __m512i k45_level(const uint8_t* g, int c, int half, int h) {
  constexpr bool kQ5 = W == DType::Q5_K;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i v = load512(g + (kQ5 ? pq5_k::nib(c, h) : pq4_k::nib(c, h)));
  __m512i l = half ? _mm512_and_si512(_mm512_srli_epi16(v, 4), m4) : _mm512_and_si512(v, m4);
  if constexpr (kQ5) l = _mm512_mask_add_epi8(l, load_mask(g + pq5_k::hbit(c, h, half)), l, _mm512_set1_epi8(0x10));
  return l;
}

// Level vector (idx, half) of a Q6_K group (idx = 8 * (2n + q) + h as in panel.h), as an
// unsigned 6-bit level: nibble | top bits moved to bits 4..5.
TS_INLINE __m512i q6_level(const uint8_t* g, int idx, int half) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i top = load512(g + pq6_k::top(idx));
  __m512i v = load512(g + pq6_k::nib(idx));
  if (half) v = _mm512_srli_epi16(v, 4);
  // The top bits sit at bit pq6_k::top_shift(idx, half); (v & 0x0F) | top in one vpternlogd.
  __m512i t;
  if ((idx & 1) == 0)
    t = half ? _mm512_slli_epi16(top, 2) : _mm512_slli_epi16(top, 4);
  else
    t = half ? _mm512_srli_epi16(top, 2) : top;
  return _mm512_ternarylogic_epi32(v, _mm512_and_si512(t, m30), m4, 0xEC);
}

// Unpacked levels of a K-quant group, in the order the tiles consume them: 64 vectors.
constexpr int kPreKBytes = kUnpackedK;

template <DType W>
constexpr int group_bytes_k() {
  return W == DType::Q4_K ? pq4_k::kBytes : W == DType::Q5_K ? pq5_k::kBytes : pq6_k::kBytes;
}

// Vector i (0..63) of the consumption order: Q4_K/Q5_K i = 16c + 8 half + h; Q6_K
// i = 16k + 8 hh2 + 4 half + hl, k = 2n + q the chunk, sub-block pass hh2 (hh), h = 4hh + hl.
template <DType W>
TS_INLINE __m512i k_level(const uint8_t* g, int i) {
  if constexpr (W == DType::Q6_K) {
    const int k = i / 16, hh = (i / 8) & 1, half = (i / 4) & 1, hl = i & 3;
    return q6_level(g, 8 * k + 4 * hh + hl, half);
  } else {
    return k45_level<W>(g, i / 16, (i / 8) & 1, i & 7);
  }
}

template <DType W>
void unpack_panel_k(const uint8_t* panel, int64_t nsb, uint8_t* out) {
  constexpr int kG = group_bytes_k<W>();
  const int64_t next = nsb * kG;
  for (int64_t sb = 0; sb < nsb; ++sb, panel += kG, out += kPreKBytes) {
    prefetch_group_l2<kG>(panel + next);
    for (int c = 0; c < 4; ++c) {
      TS_UNROLL
      for (int i = 0; i < 16; ++i) _mm512_store_si512(out + 64 * (16 * c + i), k_level<W>(panel, 16 * c + i));
    }
  }
}

// Q4_K / Q5_K.
template <DType W, int T, bool kPre, bool kPf>
void tile_kxx(const uint8_t* panel, const uint8_t* pre, int64_t nsb, const uint8_t* x, int t0, float* y, int64_t ys,
              int n_rows) {
  static_assert(T <= Act::kKTileTokens);
  constexpr int kG = group_bytes_k<W>();
  constexpr int kSc = pq4_k::kSc, kMn = pq4_k::kMn, kD = pq4_k::kD, kDmin = pq4_k::kDmin;
  static_assert(kSc == pq5_k::kSc && kMn == pq5_k::kMn && kD == pq5_k::kD && kDmin == pq5_k::kDmin);
  tile_loop<T, kG, Act::kKTileBlockBytes, kPre ? kPreKBytes : 0, kPf>(
      panel, pre, nsb, x, t0, y, ys, n_rows,
      [](const uint8_t* g, const uint8_t* pre, const uint8_t* x, __m512* acc) __attribute__((always_inline)) {
        __m512i isum[T];
        TS_UNROLL
        for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {
          TS_UNROLL
          for (int half = 0; half < 2; ++half) {
            __m512i s[T];
            TS_UNROLL
            for (int t = 0; t < T; ++t) s[t] = _mm512_setzero_si512();
            TS_UNROLL
            for (int h = 0; h < 8; ++h) {
              const __m512i l = kPre ? load512(pre + 64 * (16 * c + 8 * half + h)) : k45_level<W>(g, c, half, h);
              TS_UNROLL
              for (int t = 0; t < T; ++t) s[t] = dpbusd(s[t], l, bcast32(x + 256 * t + 64 * c + 32 * half + 4 * h));
            }
            const __m512i sc =
                _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kSc + 16 * (2 * c + half))));
            TS_UNROLL
            for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[t], sc));
          }
        }
        const __m512 d = load_half16(g + kD), dmin = load_half16(g + kDmin);
        TS_UNROLL
        for (int t = 0; t < T; ++t) {
          __m512i imin = _mm512_setzero_si512();
          TS_UNROLL
          for (int p = 0; p < 4; ++p) {
            const __m512i mn =
                _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kMn + 32 * p)));
            imin = _mm512_dpwssd_epi32(imin, mn, bcast32(x + Act::kKTileXs + 16 * t + 4 * p));
          }
          float dxs;
          std::memcpy(&dxs, x + Act::kKTileD + 4 * t, 4);
          const __m512 dx = _mm512_set1_ps(dxs);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
          acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, dx), acc[t]);
        }
      });
}

// Q6_K.
template <int T, bool kPre, bool kPf>
void tile_q6_kx(const uint8_t* panel, const uint8_t* pre, int64_t nsb, const uint8_t* x, int t0, float* y, int64_t ys,
                int n_rows) {
  static_assert(T <= Act::kKTileTokens);
  constexpr int kG = pq6_k::kBytes;
  tile_loop<T, kG, Act::kKTileBlockBytes, kPre ? kPreKBytes : 0, kPf>(
      panel, pre, nsb, x, t0, y, ys, n_rows,
      [](const uint8_t* g, const uint8_t* pre, const uint8_t* x, __m512* acc) __attribute__((always_inline)) {
        __m512i isum[T];
        TS_UNROLL
        for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
        for (int k = 0; k < 4; ++k) {  // chunk (n, q) = (k / 2, k % 2)
          const int col0 = 128 * (k / 2) + 32 * (k % 2);
          TS_UNROLL
          for (int hh = 0; hh < 2; ++hh) {
            TS_UNROLL
            for (int half = 0; half < 2; ++half) {
              // Sub-block j: 16 columns at col0 + 16 hh + 64 half.
              const int j = 8 * (k / 2) + 2 * (k % 2) + hh + 4 * half;
              __m512i s[T];
              TS_UNROLL
              for (int t = 0; t < T; ++t) s[t] = bcast32(x + Act::kKTileCorr + 64 * t + 4 * j);
              TS_UNROLL
              for (int hl = 0; hl < 4; ++hl) {
                const __m512i l = kPre ? load512(pre + 64 * (16 * k + 8 * hh + 4 * half + hl))
                                       : q6_level(g, 8 * k + 4 * hh + hl, half);
                TS_UNROLL
                for (int t = 0; t < T; ++t)
                  s[t] = dpbusd(s[t], l, bcast32(x + 256 * t + col0 + 16 * hh + 64 * half + 4 * hl));
              }
              const __m512i sc =
                  _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + pq6_k::kSc + 16 * j)));
              TS_UNROLL
              for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[t], sc));
            }
          }
        }
        const __m512 d = load_half16(g + pq6_k::kD);
        TS_UNROLL
        for (int t = 0; t < T; ++t) {
          float dxs;
          std::memcpy(&dxs, x + Act::kKTileD + 4 * t, 4);
          acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(d, _mm512_set1_ps(dxs)), acc[t]);
        }
      });
}

template <DType W, int T, bool kPre, bool kPf>
TS_INLINE void tile_kq(const uint8_t* panel, const uint8_t* pre, int64_t nsb, const uint8_t* x, int t0, float* y,
                       int64_t ys, int n_rows) {
  if constexpr (W == DType::Q6_K)
    tile_q6_kx<T, kPre, kPf>(panel, pre, nsb, x, t0, y, ys, n_rows);
  else
    tile_kxx<W, T, kPre, kPf>(panel, pre, nsb, x, t0, y, ys, n_rows);
}


// ---------------------------------------------------------------------------------------
// Drivers: tiles of kT tokens, then one tile of the remainder.

template <int T, DType W>
void tile(const uint8_t* panel, int64_t nb, const Act& act, int t0, float* y, int64_t ys, int n_rows) {
  if constexpr (W == DType::Q4_K || W == DType::Q5_K)
    tile_kx<W, T>(panel, nb, act, t0, y, ys, n_rows);
  else if constexpr (W == DType::Q6_K)
    tile_q6_k<T>(panel, nb, act, t0, y, ys, n_rows);
  else
    tile32<W, T>(panel, nb, act, t0, y, ys, n_rows);
}

// Whether to unpack a panel once for many tiles: for the nibble types (2-3 vector ops per
// level vector and tile otherwise), not for Q8_0 (its one xor costs less than the store).
template <DType W>
constexpr bool kPreUnpack = W != DType::Q8_0;

// The same for the K-quant tiles, with three or more tiles (kernels_bench matmul/*_K, 1
// thread, 128 and 512 tokens): Q5_K +7-11% and Q6_K +3-8% unpacked once; Q4_K (an and and
// a shift per level vector) 0-3% slower, so it unpacks per tile. With two tiles (16
// tokens) unpacking once was 4-11% slower for Q5_K/Q6_K.
template <DType W>
constexpr bool kPreUnpackK = W != DType::Q4_K;
constexpr int kPreMinTilesK = 2;

template <DType W>
void gemm(const uint8_t* panel, int64_t, int n_rows, const Act& act, int t0, int nt, float* y, int64_t ys) {
  constexpr bool kK = W == DType::Q4_K || W == DType::Q5_K || W == DType::Q6_K;
  // Tokens per tile of the per-token-pointer tiles (registers: kT accumulators + sums);
  // the K-quant ones run only for one token or a call starting inside a group.
  constexpr int kT = kK ? 4 : 8;
  const int64_t nb = act.n_cols / (kK ? kQKK : kQK);
  if constexpr (kK) {
    if (act.ktiles && t0 % Act::kKTileTokens == 0) {
      uint8_t* pre = nullptr;
      if (kPreUnpackK<W> && nt > kPreMinTilesK * Act::kKTileTokens) {
        pre = thread_scratch(Scratch::kUnpackedLevels, nb * kPreKBytes);
        unpack_panel_k<W>(panel, nb, pre);
      }
      const auto kq = [&]<int T, bool kPre, bool kPf>(const uint8_t* x, int t) {
        tile_kq<W, T, kPre, kPf>(panel, pre, nb, x, t, y, ys, n_rows);
      };
      return run_tiles<Act::kKTileTokens, Act::kKTileTokens>(kq, act.ktiles, nb, Act::kKTileBlockBytes, pre, t0,
                                                             nt);
    }
  } else {
    if (act.tiles && t0 % Act::kTileTokens == 0) {
      // Three or more tiles: unpack the panel once (with two, the stores cost more than the
      // unpacking they save: measured with 16 tokens).
      uint8_t* pre = nullptr;
      if (kPreUnpack<W> && nt > 2 * Act::kTileTokens) {
        pre = thread_scratch(Scratch::kUnpackedLevels, nb * kPreBytes);
        unpack_panel<W>(panel, nb, pre);
      }
      const auto q32 = [&]<int T, bool kPre, bool kPf>(const uint8_t* x, int t) {
        tile32x<W, T, kPre, kPf>(panel, pre, nb, x, t, y, ys, n_rows);
      };
      return run_tiles<Act::kTileTokens, Act::kTileTokens>(q32, act.tiles, nb, Act::kTileBlockBytes, pre, t0, nt);
    }
  }
  int t = t0;
  const int end = t0 + nt;
  for (; t + kT <= end; t += kT) tile<kT, W>(panel, nb, act, t, y, ys, n_rows);
  switch (end - t) {
    case 7:
      if constexpr (kT > 7) tile<7, W>(panel, nb, act, t, y, ys, n_rows);
      break;
    case 6:
      if constexpr (kT > 6) tile<6, W>(panel, nb, act, t, y, ys, n_rows);
      break;
    case 5:
      if constexpr (kT > 5) tile<5, W>(panel, nb, act, t, y, ys, n_rows);
      break;
    case 4:
      if constexpr (kT > 4) tile<4, W>(panel, nb, act, t, y, ys, n_rows);
      break;
    case 3:
      tile<3, W>(panel, nb, act, t, y, ys, n_rows);
      break;
    case 2:
      tile<2, W>(panel, nb, act, t, y, ys, n_rows);
      break;
    case 1:
      tile<1, W>(panel, nb, act, t, y, ys, n_rows);
      break;
    default:
      break;
  }
}

}  // namespace

void unpack_levels(DType t, const uint8_t* panel, int64_t n_blocks, uint8_t* out) {
  switch (t) {
    case DType::Q8_0:
      return unpack_panel<DType::Q8_0>(panel, n_blocks, out);
    case DType::Q4_0:
      return unpack_panel<DType::Q4_0>(panel, n_blocks, out);
    case DType::Q4_1:
      return unpack_panel<DType::Q4_1>(panel, n_blocks, out);
    case DType::Q5_0:
      return unpack_panel<DType::Q5_0>(panel, n_blocks, out);
    case DType::Q5_1:
      return unpack_panel<DType::Q5_1>(panel, n_blocks, out);
    case DType::Q4_K:
      return unpack_panel_k<DType::Q4_K>(panel, n_blocks, out);
    case DType::Q5_K:
      return unpack_panel_k<DType::Q5_K>(panel, n_blocks, out);
    case DType::Q6_K:
      return unpack_panel_k<DType::Q6_K>(panel, n_blocks, out);
    default:
      return;
  }
}

PanelGemmFn quant_gemm(DType t) {
  switch (t) {
    case DType::Q8_0:
      return gemm<DType::Q8_0>;
    case DType::Q4_0:
      return gemm<DType::Q4_0>;
    case DType::Q4_1:
      return gemm<DType::Q4_1>;
    case DType::Q5_0:
      return gemm<DType::Q5_0>;
    case DType::Q5_1:
      return gemm<DType::Q5_1>;
    case DType::Q4_K:
      return gemm<DType::Q4_K>;
    case DType::Q5_K:
      return gemm<DType::Q5_K>;
    case DType::Q6_K:
      return gemm<DType::Q6_K>;
    default:
      return nullptr;
  }
}

}  // namespace ts::kernels::avx512
