// AVX2 panel kernels of the quantized types (layout in panel.h), for CPUs without
// AVX-512 VNNI.
//
// A 256-bit vector holds 4 levels of each of 8 rows, so a 16-row panel is two halves.
// vpmaddubsw multiplies unsigned levels with signed activation levels into 16-bit pair
// sums; several of those are added in 16 bits while no overflow is possible (the bound is
// noted at each use), then vpmaddwd widens them — by ones, or for the K-quants directly by
// the sub-block scales. Q8_0's signed levels use the sign trick: |w| * sign(x, w).
//
// Integer sums are exact and the float operations are the scalar kernels' in the same
// order, so results are bit-identical to every other path.
#include <immintrin.h>

#include <cstring>

#include "act.h"
#include "gemm_avx2.h"
#include "panel.h"
#include "prefetch.h"
#include "quant_blocks.h"

namespace ts::kernels::avx2 {
namespace {

#define TS_INLINE inline __attribute__((always_inline))
#define TS_UNROLL _Pragma("GCC unroll 16")
#define TS_LAMBDA_INLINE __attribute__((always_inline))

TS_INLINE __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
// Step `step` of kSteps of a half's walk over group g requests its part of the next group
// (prefetch.h): one token takes both halves of a group in turn (2 x kSteps parts), several
// tokens all of half 0's groups before half 1's, whose rows then come from cache (half 1
// requests nothing).
template <int T, int kBytes, int kSteps>
TS_INLINE void prefetch_step(const uint8_t* g, int half, int step) {
  if constexpr (T == 1)
    prefetch_part<kBytes, 2 * kSteps>(g + kBytes, kSteps * half + step);
  else if (half == 0)
    prefetch_part<kBytes, kSteps>(g + kBytes, step);
}

// An integer sum accumulated in order: without it GCC reassociates a tile's chains of adds
// into wide trees whose partial sums outnumber the registers and spill (the results are the
// same: integer adds).
TS_INLINE void keep_chain(__m256i& v) { asm("" : "+x"(v)); }

TS_INLINE __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
TS_INLINE __m256 load_half8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
TS_INLINE __m256i ones16() { return _mm256_set1_epi16(1); }

// The 32-bit mask of one half (8 rows x 4 columns) expanded to bytes: `bit` where set.
TS_INLINE __m256i expand_mask(const uint8_t* mask64, int half, char bit) {
  uint32_t m;
  std::memcpy(&m, mask64 + 4 * half, 4);
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2,
                                        2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bits = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  const __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32(int32_t(m)), shuf);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, bits), bits), _mm256_set1_epi8(bit));
}

TS_INLINE void store_rows(float* y, __m256 v, int n) {
  if (n >= 8) {
    _mm256_storeu_ps(y, v);
  } else {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    for (int i = 0; i < n; ++i) y[i] = tmp[i];
  }
}

template <int T>
struct Tokens {
  const int8_t* q[T];
  const float* d[T];
  const int32_t* corr[T];
  const float* s[T];
  const int16_t* xs[T];
  int64_t nb = 0;  // blocks per row (tile32: to find a block in the unpacked panel)
  Tokens(const Act& a, int t0) {
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
// 32-element blocks.

// The levels of vector h (0..3) of one half of a nibble type's block g: lo (columns 4h..,
// low nibbles) and hi (16 + 4h.., high nibbles), each 8 rows x 4 columns, with Q5's fifth
// bits or-ed in.
template <DType W>
TS_INLINE void unpack_pair(const uint8_t* g, int half, int h, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load256(g + 64 * h + 32 * half);
  lo = _mm256_and_si256(v, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  if constexpr (W == DType::Q5_0 || W == DType::Q5_1) {
    lo = _mm256_or_si256(lo, expand_mask(g + pq5_0::kHbit + 16 * h, half, 0x10));
    hi = _mm256_or_si256(hi, expand_mask(g + pq5_0::kHbit + 16 * h + 8, half, 0x10));
  }
}

// A nibble type's panel with its levels unpacked to bytes, once for the many tiles of a
// prompt's tokens (each tile would unpack every block again): per half, per block, lo[h]
// and hi[h] of unpack_pair for h = 0..3 in that order, so that a tile's walk over one half
// reads them in order.
constexpr int kPreBlockBytes = 256;

template <DType W>
void unpack_panel(const uint8_t* panel, int64_t nb, int n_rows, uint8_t* out) {
  constexpr int kG = group_bytes32<W>();
  for (int half = 0; half < 2 && 8 * half < n_rows; ++half) {
    uint8_t* o = out + half * nb * kPreBlockBytes;
    for (int64_t b = 0; b < nb; ++b, o += kPreBlockBytes) {
      TS_UNROLL
      for (int h = 0; h < 4; ++h) {
        __m256i lo, hi;
        unpack_pair<W>(panel + b * kG, half, h, lo, hi);
        _mm256_store_si256(reinterpret_cast<__m256i*>(o + 64 * h), lo);
        _mm256_store_si256(reinterpret_cast<__m256i*>(o + 64 * h + 32), hi);
      }
    }
  }
}

// One block (32 columns) of one half (8 rows) for T tokens, added to acc. next: 0, or
// where the same block of the next panel is (the panel's first tile of several tokens).
// kPre: the levels come from pre, the panel's unpacked levels (unpack_panel).
template <DType W, int T, bool kPre>
TS_INLINE void block32(const uint8_t* panel, int64_t b, int half, const Tokens<T>& tk, int64_t next, const uint8_t* pre,
                       __m256* acc) {
  constexpr int kG = group_bytes32<W>();
  const uint8_t* g = panel + b * kG;
  const __m256 dw = load_half8(g + d_offset32<W>() + 16 * half);
  // One token (decode) walks both halves block by block and its loop per block is short,
  // so the out-of-order window holds few blocks' loads: request the block 8 groups ahead
  // (Zen 4, AVX2, decode t1 / t2 medians of 7 alternating runs: 110m Q8_0 153 -> 167 /
  // 209 -> 234 tok/s, SmolLM2-135M Q4_1 103 -> 152 / 156 -> 218; 16 or 32 groups ahead
  // no better). Several tokens compute longer per block, but their first tile of a panel
  // still waits on memory where the matrix does not stay in cache (a batched decode step's
  // output projection): its half 0, which reads every line, requests the next panel's
  // block, as the AVX-512 tiles do (prefetch.h). Zen 5, kernels_bench matmul avx2
  // 262144x640/n16, medians of 5 alternating runs, t1 / t2: Q8_0 91 -> 154 / 173 -> 282
  // GFLOP/s, Q5_0 98 -> 119 / 175 -> 231; 4096x640 (from cache) unchanged. Requesting 4
  // groups ahead instead measured the same for Q8_0 and 10-15% less for Q5_0.
  if constexpr (T == 1) {
    constexpr int kAhead = 8;
    if (half == 0) prefetch_part<kG, 1>(g + kAhead * kG, 0);
  } else {
    if (next != 0 && half == 0 && !kPre) prefetch_group_l2<kG>(g + next);
  }
  __m256i isum[T];
  if constexpr (W == DType::Q8_0) {
    // |w| * sign(x, w): pairs are at most 2 * 128 * 127 = 32512, so widen each one.
    TS_UNROLL
    for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
    TS_UNROLL
    for (int j = 0; j < 8; ++j) {
      const __m256i w = load256(g + 64 * j + 32 * half);
      const __m256i aw = _mm256_sign_epi8(w, w);
      TS_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m256i x = bcast32(tk.q[t] + 32 * b + 4 * j);
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, w));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, ones16()));
        keep_chain(isum[t]);
      }
    }
  } else {
    // Levels <= 31: the 4 low-nibble pair sums of a row stay within 4 * 2 * 31 * 127 =
    // 31496 in 16 bits, and so do the 4 high-nibble ones; each is widened once.
    __m256i p0[T], p1[T];
    TS_UNROLL
    for (int h = 0; h < 4; ++h) {
      __m256i lo, hi;
      if constexpr (kPre) {
        const uint8_t* u = pre + (half * tk.nb + b) * kPreBlockBytes + 64 * h;
        lo = load256(u);
        hi = load256(u + 32);
      } else {
        unpack_pair<W>(g, half, h, lo, hi);
      }
      TS_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m256i a = _mm256_maddubs_epi16(lo, bcast32(tk.q[t] + 32 * b + 4 * h));
        const __m256i c = _mm256_maddubs_epi16(hi, bcast32(tk.q[t] + 32 * b + 16 + 4 * h));
        p0[t] = h == 0 ? a : _mm256_add_epi16(p0[t], a);
        p1[t] = h == 0 ? c : _mm256_add_epi16(p1[t], c);
        if constexpr (T > 1) {  // (one token: 10% slower matvecs with it)
          keep_chain(p0[t]);
          keep_chain(p1[t]);
        }
      }
    }
    TS_UNROLL
    for (int t = 0; t < T; ++t) {
      isum[t] = _mm256_add_epi32(_mm256_madd_epi16(p0[t], ones16()), _mm256_madd_epi16(p1[t], ones16()));
      if constexpr (!has_min32<W>())
        isum[t] = _mm256_add_epi32(isum[t], _mm256_set1_epi32(tk.corr[t][b]));
    }
  }
  TS_UNROLL
  for (int t = 0; t < T; ++t) {
    const __m256 dxw = _mm256_mul_ps(dw, _mm256_set1_ps(tk.d[t][b]));
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), dxw, acc[t]);
    if constexpr (has_min32<W>()) {
      constexpr int kM = m_offset32<W>();
      acc[t] = _mm256_fmadd_ps(load_half8(g + kM + 16 * half), _mm256_set1_ps(tk.s[t][b]), acc[t]);
    }
  }
}

// The tiles' walk over a panel: block(b, half, acc) adds block b of half `half` (8 rows)
// for the tile's tokens to acc. One token takes both halves block by block, so that the
// panel is read once, in order (each 64-byte line whole): a matvec streams it from DRAM
// (kernels_bench matvec t1 on Zen 4: Q4_1 10-15 -> 14-20 GB/s, Q5_0 8-11 -> 10-14).
// Several tokens take one half at a time (the registers hold one half's sums).
template <int T, class Block>
TS_INLINE void walk_panel(int64_t nb, int n_rows, float* y, int64_t ys, int t0, Block&& block) {
  if constexpr (T == 1) {
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    if (n_rows > 8) {
      for (int64_t b = 0; b < nb; ++b) {
        block(b, 0, &acc[0]);
        block(b, 1, &acc[1]);
      }
    } else {
      for (int64_t b = 0; b < nb; ++b) block(b, 0, &acc[0]);
    }
    store_rows(y + t0 * ys, acc[0], n_rows);
    if (n_rows > 8) store_rows(y + t0 * ys + 8, acc[1], n_rows - 8);
  } else {
    for (int half = 0; half < 2 && 8 * half < n_rows; ++half) {
      __m256 acc[T];
      TS_UNROLL
      for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) block(b, half, acc);
      TS_UNROLL
      for (int t = 0; t < T; ++t) store_rows(y + (t0 + t) * ys + 8 * half, acc[t], n_rows - 8 * half);
    }
  }
}

template <DType W, int T, bool kPre = false>
void tile32(const uint8_t* panel, int64_t nb, const Act& act, int t0, float* y, int64_t ys, int n_rows,
            const uint8_t* pre = nullptr) {
  Tokens<T> tk(act, t0);
  tk.nb = nb;
  // The panel's first tile (matmul.cc's run_panels starts each panel at token 0) requests
  // the next one. Panels are consecutive where they are pre-packed; elsewhere (a panel
  // packed on the fly, past the last panel) the requests are of no use but harmless.
  const int64_t next = T > 1 && t0 == 0 ? nb * group_bytes32<W>() : 0;
  walk_panel<T>(nb, n_rows, y, ys, t0, [&](int64_t b, int half, __m256* acc) TS_LAMBDA_INLINE {
    block32<W, T, kPre>(panel, b, half, tk, next, pre, acc);
  });
}

// ---------------------------------------------------------------------------------------
// Q4_K / Q5_K.

// Sub-block scales of one half as 16-bit pairs (sc, sc) per row, for vpmaddwd.
TS_INLINE __m256i scale_pairs(const uint8_t* sc16) {
  const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc16)));
  return _mm256_or_si256(s, _mm256_slli_epi32(s, 16));
}

// Q4_K levels unpacked once per call (as unpack_panel): per half, per super-block, the
// level vectors of block_kx's loops over (c, hi_nib, h).
constexpr int kPreKBytes = 2048;

void unpack_panel_q4k(const uint8_t* panel, int64_t nsb, int n_rows, uint8_t* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int half = 0; half < 2 && 8 * half < n_rows; ++half) {
    uint8_t* o = out + half * nsb * kPreKBytes;
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const uint8_t* g = panel + sb * pq4_k::kBytes;
      for (int c = 0; c < 4; ++c)
        for (int hi_nib = 0; hi_nib < 2; ++hi_nib)
          for (int h = 0; h < 8; ++h, o += 32) {
            const __m256i v = load256(g + pq4_k::nib(c, h) + 32 * half);
            _mm256_store_si256(reinterpret_cast<__m256i*>(o), hi_nib ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)
                                                                      : _mm256_and_si256(v, m4));
          }
    }
  }
}

// Super-block sb of one half for T tokens, added to acc.
template <DType W, int T, bool kPre = false>
TS_INLINE void block_kx(const uint8_t* panel, int64_t sb, int half, const Tokens<T>& tk, const uint8_t* pre,
                        __m256* acc) {
  constexpr bool kQ5 = W == DType::Q5_K;
  constexpr int kG = kQ5 ? pq5_k::kBytes : pq4_k::kBytes;
  constexpr int kSc = kQ5 ? pq5_k::kSc : pq4_k::kSc;
  constexpr int kMn = kQ5 ? pq5_k::kMn : pq4_k::kMn;
  constexpr int kD = kQ5 ? pq5_k::kD : pq4_k::kD;
  constexpr int kDmin = kQ5 ? pq5_k::kDmin : pq4_k::kDmin;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const uint8_t* g = panel + sb * kG;
  __m256i isum[T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
  // Sub-block 2c + hi_nib: the low (hi_nib = 0) or high nibbles of chunk c's vectors,
  // one pass each, so that only two sums per token are live (four tokens fit).
  for (int c = 0; c < 4; ++c) {
    if constexpr (!kPre) prefetch_step<T, kG, 4>(g, half, c);
    TS_UNROLL
    for (int hi_nib = 0; hi_nib < 2; ++hi_nib) {
      const __m256i sc = scale_pairs(g + kSc + 32 * c + 16 * hi_nib + 8 * half);
      // Levels <= 31: 4 pair sums stay within 4 * 2 * 31 * 127 = 31496.
      __m256i a[T];
      TS_UNROLL
      for (int h = 0; h < 8; ++h) {
        __m256i w;
        if constexpr (kPre) {
          w = load256(pre + (half * tk.nb + sb) * kPreKBytes + 32 * (16 * c + 8 * hi_nib + h));
        } else {
          const __m256i v = load256(g + (kQ5 ? pq5_k::nib(c, h) : pq4_k::nib(c, h)) + 32 * half);
          w = hi_nib ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
        }
        if constexpr (kQ5) w = _mm256_or_si256(w, expand_mask(g + pq5_k::hbit(c, h, 0) + 8 * hi_nib, half, 0x10));
        TS_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256i p = _mm256_maddubs_epi16(w, bcast32(tk.q[t] + 256 * sb + 64 * c + 32 * hi_nib + 4 * h));
          a[t] = h % 4 == 0 ? p : _mm256_add_epi16(a[t], p);
          keep_chain(a[t]);
          if (h % 4 == 3) isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(a[t], sc));
        }
      }
    }
  }
  const __m256 d = load_half8(g + kD + 16 * half), dmin = load_half8(g + kDmin + 16 * half);
  TS_UNROLL
  for (int t = 0; t < T; ++t) {
    __m256i imin = _mm256_setzero_si256();
    TS_UNROLL
    for (int p = 0; p < 4; ++p) {
      const __m256i m = _mm256_cvtepu8_epi16(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kMn + 32 * p + 16 * half)));
      imin = _mm256_add_epi32(imin, _mm256_madd_epi16(m, bcast32(tk.xs[t] + 8 * sb + 2 * p)));
    }
    const __m256 dx = _mm256_set1_ps(tk.d[t][sb]);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, dx), acc[t]);
    acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dmin, dx), acc[t]);
  }
}

template <DType W, int T, bool kPre = false>
void tile_kx(const uint8_t* panel, int64_t nsb, const Act& act, int t0, float* y, int64_t ys, int n_rows,
             const uint8_t* pre = nullptr) {
  Tokens<T> tk(act, t0);
  tk.nb = nsb;
  walk_panel<T>(nsb, n_rows, y, ys, t0, [&](int64_t sb, int half, __m256* acc) TS_LAMBDA_INLINE {
    block_kx<W, T, kPre>(panel, sb, half, tk, pre, acc);
  });
}

// ---------------------------------------------------------------------------------------
// Q6_K.

// Super-block sb of one half for T tokens, added to acc.
template <int T>
TS_INLINE void block_q6_k(const uint8_t* panel, int64_t sb, int half, const Tokens<T>& tk, __m256* acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const uint8_t* g = panel + sb * pq6_k::kBytes;
  __m256i isum[T];
  TS_UNROLL
  for (int t = 0; t < T; ++t) isum[t] = _mm256_setzero_si256();
  for (int n = 0; n < 2; ++n) {
    for (int q = 0; q < 2; ++q) {
      prefetch_step<T, pq6_k::kBytes, 4>(g, half, 2 * n + q);
      // Chunk 2n + q of the group (offsets from its start: no division at run time).
      const uint8_t* chunk = g + pq6_k::nib(0) + pq6_k::kChunk * (2 * n + q);
      // Sub-blocks j = 8n + 2q + hh + 4 * hi_nib from the low (hi_nib = 0) and high nibbles
      // of the chunk's nib[4hh .. 4hh + 3]. With many tokens in separate passes, so that few sums
      // per token are live; with one or two, both from one load of the vectors (a
      // second pass over them made decode 20% slower).
      constexpr bool kSplit = T > 2;
      constexpr int kPasses = kSplit ? 2 : 1, kNibs = kSplit ? 1 : 2;
      TS_UNROLL
      for (int hh = 0; hh < 2; ++hh) {
        TS_UNROLL
        for (int pass = 0; pass < kPasses; ++pass) {
          auto nib_of = [&](int k) { return kSplit ? pass : k; };
          auto sub_block = [&](int k) { return 8 * n + 2 * q + hh + 4 * nib_of(k); };
          __m256i a[kNibs][T];
          TS_UNROLL
          for (int k = 0; k < kNibs; ++k) {
            TS_UNROLL
            for (int t = 0; t < T; ++t) a[k][t] = _mm256_set1_epi32(tk.corr[t][16 * sb + sub_block(k)]);
          }
          TS_UNROLL
          for (int h2 = 0; h2 < 2; ++h2) {
            // Two nibble vectors share one vector of top bits (panel.h).
            const int h = 4 * hh + 2 * h2;
            const __m256i top = load256(chunk + pq6_k::top(h) - pq6_k::nib(0) + 32 * half);
            const __m256i va = load256(chunk + pq6_k::nib(h) - pq6_k::nib(0) + 32 * half);
            const __m256i vb = load256(chunk + pq6_k::nib(h + 1) - pq6_k::nib(0) + 32 * half);
            TS_UNROLL
            for (int k = 0; k < kNibs; ++k) {
              const bool hi_nib = nib_of(k) == 1;
              const __m256i lv[2] = {
                  hi_nib ? _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(va, 4), m4),
                                           _mm256_and_si256(_mm256_slli_epi16(top, 2), m30))
                         : _mm256_or_si256(_mm256_and_si256(va, m4), _mm256_and_si256(_mm256_slli_epi16(top, 4), m30)),
                  hi_nib ? _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(vb, 4), m4),
                                           _mm256_and_si256(_mm256_srli_epi16(top, 2), m30))
                         : _mm256_or_si256(_mm256_and_si256(vb, m4), _mm256_and_si256(top, m30))};
              // Levels <= 63: the 2 pair sums of e = 0, 1 stay within 2 * 2 * 63 * 127 = 32004.
              TS_UNROLL
              for (int t = 0; t < T; ++t) {
                const int8_t* x = tk.q[t] + 256 * sb + 128 * n + 32 * q + 4 * h + 64 * nib_of(k);
                const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lv[0], bcast32(x)),
                                                   _mm256_maddubs_epi16(lv[1], bcast32(x + 4)));
                a[k][t] = _mm256_add_epi32(a[k][t], _mm256_madd_epi16(p, ones16()));
                keep_chain(a[k][t]);
              }
            }
          }
          TS_UNROLL
          for (int k = 0; k < kNibs; ++k) {
            const __m256i sc = _mm256_cvtepi8_epi32(
                _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + pq6_k::kSc + 16 * sub_block(k) + 8 * half)));
            TS_UNROLL
            for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(a[k][t], sc));
          }
        }
      }
    }
  }
  const __m256 d = load_half8(g + pq6_k::kD + 16 * half);
  TS_UNROLL
  for (int t = 0; t < T; ++t)
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(d, _mm256_set1_ps(tk.d[t][sb])),
                             acc[t]);
}

template <int T>
void tile_q6_k(const uint8_t* panel, int64_t nsb, const Act& act, int t0, float* y, int64_t ys, int n_rows) {
  const Tokens<T> tk(act, t0);
  walk_panel<T>(nsb, n_rows, y, ys, t0,
                [&](int64_t sb, int half, __m256* acc) TS_LAMBDA_INLINE { block_q6_k<T>(panel, sb, half, tk, acc); });
}

// ---------------------------------------------------------------------------------------

template <int T, DType W>
void tile(const uint8_t* panel, int64_t nb, const Act& act, int t0, float* y, int64_t ys, int n_rows) {
  if constexpr (W == DType::Q4_K || W == DType::Q5_K)
    tile_kx<W, T>(panel, nb, act, t0, y, ys, n_rows);
  else if constexpr (W == DType::Q6_K)
    tile_q6_k<T>(panel, nb, act, t0, y, ys, n_rows);
  else
    tile32<W, T>(panel, nb, act, t0, y, ys, n_rows);
}

// The last n < kT tokens as one tile of n (R: the largest n).
template <int R, DType W>
void tail(int n, const uint8_t* panel, int64_t nb, const Act& act, int t0, float* y, int64_t ys, int n_rows) {
  if constexpr (R > 0) {
    if (n == R)
      tile<R, W>(panel, nb, act, t0, y, ys, n_rows);
    else
      tail<R - 1, W>(n, panel, nb, act, t0, y, ys, n_rows);
  }
}

// Whether a nibble type's panel is unpacked once for a call's tiles (unpack_panel), from how
// many tokens: for Q5_0 and Q5_1, whose fifth bits cost 5 vector ops per level vector and
// tile. Zen 5, kernels_bench matmul/<type>/avx2 896x4864 and 4096x2048, t1, medians of 5
// alternating runs: Q5_0 1.31-1.42x faster with 16 and 32 tokens, 1.52-1.66x with 128 and
// 512; Q4_0 and Q4_1 (an and and a shift per level vector) 0.81-0.93x with 16 and 32
// tokens, 0.96-1.09x with more, so they unpack per tile. Q4_K (an and, and for the high
// nibbles a shift, per level vector) from 64 tokens: 7 alternating runs, 896x4864 and
// 4096x2048, 0.90-0.97x with 16 tokens, 1.02-1.19x with 128, 1.15x with 512; 512-token
// prompts of 110m Q4_K_M +5.8% / +9.2% at 1 / 2 threads (7 and 5 alternations). Q6_K
// measured 0.80-1.31x in two sets of runs and nothing end to end: per tile.
template <DType W>
constexpr bool kPreUnpack = W == DType::Q5_0 || W == DType::Q5_1 || W == DType::Q4_K;
constexpr int kPreMinTokens = 16, kPreMinTokensK = 64;

template <DType W>
void gemm(const uint8_t* panel, int64_t, int n_rows, const Act& act, int t0, int nt, float* y, int64_t ys) {
  constexpr bool kK = W == DType::Q4_K || W == DType::Q5_K || W == DType::Q6_K;
  // 16 vector registers; Q8_0 keeps one sum per token (kernels_bench matmul q8_0 n512 t1:
  // 6 tokens 2-4% faster than 4).
  constexpr int kT = W == DType::Q8_0 ? 6 : 4;
  const int64_t nb = act.n_cols / (kK ? kQKK : kQK);
  int t = t0;
  const int end = t0 + nt;
  if constexpr (kPreUnpack<W>) {
    if (nt >= (W == DType::Q4_K ? kPreMinTokensK : kPreMinTokens)) {
      if constexpr (W == DType::Q4_K) {
        uint8_t* pre = thread_scratch(Scratch::kUnpackedLevels, 2 * nb * kPreKBytes);
        unpack_panel_q4k(panel, nb, n_rows, pre);
        for (; t + kT <= end; t += kT) tile_kx<W, kT, true>(panel, nb, act, t, y, ys, n_rows, pre);
      } else {
        uint8_t* pre = thread_scratch(Scratch::kUnpackedLevels, 2 * nb * kPreBlockBytes);
        unpack_panel<W>(panel, nb, n_rows, pre);
        for (; t + kT <= end; t += kT) tile32<W, kT, true>(panel, nb, act, t, y, ys, n_rows, pre);
      }
      return tail<kT - 1, W>(end - t, panel, nb, act, t, y, ys, n_rows);
    }
  }
  for (; t + kT <= end; t += kT) tile<kT, W>(panel, nb, act, t, y, ys, n_rows);
  tail<kT - 1, W>(end - t, panel, nb, act, t, y, ys, n_rows);
}

}  // namespace

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

}  // namespace ts::kernels::avx2
