// AMX-INT8 panel kernels of the quantized types: the integer sums of 16 tokens x 16 weight
// rows come from tile multiplies (tdpbssd / tdpbsud), the float arithmetic per (row, token)
// stays the AVX-512 tiles' (gemm_avx512.cc) — so results are bit-identical to every other
// path, and a step may run some tokens here and others on VNNI.
//
// Q6_K has no tile kernel: its 16-column sub-blocks make half-size tile multiplies with a
// full float epilogue each, which ran at 0.75-0.8x the VNNI kernel (docs/BENCHMARKS.md,
// AMX); it stays on VNNI.
//
// Tiles, per unit of K columns (a 32-element block; a 32-column sub-block of Q4_K/Q5_K):
//   A (m tokens x K bytes): the tokens' int8 activation levels, straight from Act::qs
//     (stride Act::tok_bytes);
//   B (K/4 rows x 64 bytes): the weights in panel.h's word layout (16 rows x 4 columns per
//     64 bytes), which is exactly AMX's B layout — Q8_0 panels as they are (signed), the
//     other types as unpack_levels() leaves them (unsigned);
//   C (m x 16 int32): C[token][row] = the unit's dot product, then stored and read back as
//     one 16-row vector per token, the lane layout of the AVX-512 accumulators.
// Units run through a pipeline of tiles (TilePipe): two A/B pairs and four C tiles, so that
// a unit's multiply, the previous unit's store and the float work of the unit before that
// overlap instead of waiting on each other.
//
// The kernels are written against a tile "machine" (a template parameter): HwTiles issues
// the instructions; EmuTiles (below) executes them in software, so the tile code — shapes,
// strides, operand order, signedness — is tested on CPUs without AMX (amx::emulated_gemm).

// GCC 12's AVX-512 intrinsics build on self-initialized "undefined" vectors and warn
// about them at every inlined use; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "act.h"
#include "core/check.h"
#include "core/log.h"
#include "core/rng.h"
#include "gemm_amx.h"
#include "gemm_avx512.h"
#include "panel.h"
#include "quant_blocks.h"

namespace ts::kernels::amx {
namespace {

using avx512::kUnpacked32;
using avx512::kUnpackedK;

#define TS_INLINE inline __attribute__((always_inline))
#define TS_UNROLL _Pragma("GCC unroll 16")

// The 64-byte operand of ldtilecfg (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row of tile i
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// The instructions, through inline assembly: the tile number must be an immediate (the
// %c operand prints it bare), and the memory clobbers order the tile loads and stores
// with the vector code around them. ldtilecfg takes the config as a memory operand, so
// its stores cannot be dropped as dead (the GCC 12 bug that breaks llama.cpp's AMX path,
// where the config is passed to the builtin through a pointer).
struct HwTiles {
  static void load_config(const TileConfig& c) { asm volatile("ldtilecfg %0" ::"m"(c) : "memory"); }
  template <int T>
  static TS_INLINE void zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static TS_INLINE void load(const void* p, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static TS_INLINE void store(void* p, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  // C += A (signed bytes) . B (kSignedB: signed, else unsigned bytes). AT&T operand order:
  // B, A, C.
  template <int C, int A, int B, bool kSignedB>
  static TS_INLINE void dp() {
    if constexpr (kSignedB)
      asm volatile("tdpbssd %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(B), "i"(A), "i"(C));
    else
      asm volatile("tdpbsud %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(B), "i"(A), "i"(C));
  }
};

// The same instructions executed in software, per thread, with the architecture's checks
// (a configuration the CPU rejects, or operand shapes that do not fit, fail a TS_CHECK
// where the CPU would raise #UD).
struct EmuTiles {
  struct State {
    TileConfig cfg;
    bool configured = false;
    uint8_t t[8][16][64];
  };
  static State& st() {
    thread_local State s;
    return s;
  }
  static void load_config(const TileConfig& c) {
    State& s = st();
    TS_CHECK(c.palette == 1 && c.start_row == 0);
    for (uint8_t b : c.reserved) TS_CHECK(b == 0);
    for (int i = 0; i < 16; ++i) {
      if (i >= 8) {
        TS_CHECK(c.rows[i] == 0 && c.colsb[i] == 0);
      } else {
        TS_CHECK(c.rows[i] <= 16 && c.colsb[i] <= 64);
        TS_CHECK((c.rows[i] == 0) == (c.colsb[i] == 0));
      }
    }
    s.cfg = c;
    s.configured = true;
    std::memset(s.t, 0, sizeof s.t);
  }
  static void check_tile(int t) {
    const State& s = st();
    TS_CHECK(s.configured && s.cfg.rows[t] > 0);
  }
  template <int T>
  static void zero() {
    check_tile(T);
    std::memset(st().t[T], 0, sizeof st().t[T]);
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    check_tile(T);
    State& s = st();
    std::memset(s.t[T], 0, sizeof s.t[T]);  // rows and columns past the shape read as zero
    for (int r = 0; r < s.cfg.rows[T]; ++r)
      std::memcpy(s.t[T][r], static_cast<const uint8_t*>(p) + r * stride, s.cfg.colsb[T]);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    check_tile(T);
    const State& s = st();
    for (int r = 0; r < s.cfg.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, s.t[T][r], s.cfg.colsb[T]);
  }
  template <int C, int A, int B, bool kSignedB>
  static void dp() {
    check_tile(C);
    check_tile(A);
    check_tile(B);
    State& s = st();
    const TileConfig& c = s.cfg;
    const int m = c.rows[C], n = c.colsb[C] / 4, k = c.colsb[A] / 4;
    TS_CHECK(c.colsb[C] % 4 == 0 && c.colsb[A] % 4 == 0 && c.rows[A] == m && c.colsb[B] == c.colsb[C] &&
             c.rows[B] == k);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        int32_t acc;
        std::memcpy(&acc, &s.t[C][i][4 * j], 4);
        for (int kk = 0; kk < k; ++kk) {
          for (int e = 0; e < 4; ++e) {
            const int32_t a = int8_t(s.t[A][i][4 * kk + e]);
            const uint8_t braw = s.t[B][kk][4 * j + e];
            const int32_t b = kSignedB ? int32_t(int8_t(braw)) : int32_t(braw);
            acc = int32_t(uint32_t(acc) + uint32_t(a * b));  // wraps like the hardware
          }
        }
        std::memcpy(&s.t[C][i][4 * j], &acc, 4);
      }
    }
  }
};

// Tokens per tile multiply (rows of A and C).
constexpr int kTok = 16;

// Loads the configuration for m tokens and units of k_bytes columns, unless this thread
// has it loaded already: tiles 0, 1 (A), 2, 3 (B), 4..7 (C). (The kernels use one shape,
// 16 tokens x 32 bytes; agrees_with_vnni runs them too.)
template <class P>
void configure(int m, int k_bytes) {
  TileConfig c;
  for (int s = 0; s < 2; ++s) {
    c.rows[s] = uint8_t(m);
    c.colsb[s] = uint16_t(k_bytes);
    c.rows[2 + s] = uint8_t(k_bytes / 4);
    c.colsb[2 + s] = 64;
  }
  for (int s = 4; s < 8; ++s) {
    c.rows[s] = uint8_t(m);
    c.colsb[s] = 64;
  }
  thread_local TileConfig loaded;
  thread_local bool have = false;
  if (have && std::memcmp(&loaded, &c, sizeof c) == 0) return;
  P::load_config(c);
  loaded = c;
  have = true;
}

// The units of a group, in order, through the tiles: unit u multiplies into C tile u & 3
// from A and B tiles u & 1, and its result is stored one issue later, after the next
// unit's multiply has been issued. A tile multiply's result is far from ready when it is
// issued, and a tile store must land in memory before the vector code can read it (no
// store forwarding): storing at once and reading the unit before would stall every unit on
// the whole chain. Here a unit's multiply has one unit of tile and vector work to
// complete behind it before its store, and its store another before its result is read:
// callers read a unit's result only after issuing (or flushing) the unit after it.
template <class P, bool kSignedB>
class TilePipe {
 public:
  // Multiplies unit u = this call's ordinal (a: m tokens, a_stride apart; b: the B tile),
  // then stores the unit before it. `dst`: where this unit's m x 16 int32 go (64-byte rows).
  TS_INLINE void issue(const int8_t* a, int64_t a_stride, const uint8_t* b, int32_t* dst) {
    switch (u_ & 3) {
      case 0: multiply<0>(a, a_stride, b); break;
      case 1: multiply<1>(a, a_stride, b); break;
      case 2: multiply<2>(a, a_stride, b); break;
      default: multiply<3>(a, a_stride, b); break;
    }
    store_last();
    last_ = dst;
    ++u_;
  }
  // Stores the last unit issued (before its result is read, when no unit follows it).
  TS_INLINE void flush() {
    store_last();
    last_ = nullptr;
  }

 private:
  template <int U>
  static TS_INLINE void multiply(const int8_t* a, int64_t a_stride, const uint8_t* b) {
    constexpr int kA = U & 1, kB = 2 + (U & 1), kC = 4 + U;
    P::template zero<kC>();
    P::template load<kA>(a, a_stride);
    P::template load<kB>(b, 64);
    P::template dp<kC, kA, kB, kSignedB>();
  }
  TS_INLINE void store_last() {
    if (!last_) return;
    switch ((u_ - 1) & 3) {
      case 0: P::template store<4>(last_, 64); break;
      case 1: P::template store<5>(last_, 64); break;
      case 2: P::template store<6>(last_, 64); break;
      default: P::template store<7>(last_, 64); break;
    }
  }
  int64_t u_ = 0;
  int32_t* last_ = nullptr;
};

TS_INLINE __m512 load_half16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
TS_INLINE __m512i load_c(const int32_t* c) { return _mm512_load_si512(c); }

TS_INLINE void store_rows(float* y, __m512 v, int n_rows) {
  _mm512_mask_storeu_ps(y, __mmask16((1u << n_rows) - 1), v);
}

// The tokens [t, t + m) of one panel (M: m as a constant, so the accumulators live in
// registers; 0: m at run time).
struct Group {
  const Act& act;
  int t, m;
  float* y;
  int64_t ys;
  int n_rows;
  // The A rows: the tokens' levels in place, or (a last group of fewer than 16 tokens) a
  // copy padded with zero rows, so that every group runs on one tile configuration.
  const int8_t* a_rows;
  int64_t a_stride;
  const int8_t* a() const { return a_rows; }
  // The accumulators of the first m tokens into their rows of y.
  TS_INLINE void store(const __m512* acc, int m) const {
    TS_UNROLL
    for (int i = 0; i < kTok; ++i) {
      if (i >= m) break;
      store_rows(y + (t + i) * ys, acc[i], n_rows);
    }
  }
};

TS_INLINE void zero(__m512* acc) {
  TS_UNROLL
  for (int i = 0; i < kTok; ++i) acc[i] = _mm512_setzero_ps();
}

// 32-element blocks. Q8_0 multiplies its signed panel levels directly (no offset); the
// others multiply their unpacked unsigned levels and add the activations' -offset * sum
// (Q4_0/Q5_0), or add the min term (Q4_1/Q5_1), as tile32 does.
template <DType W, class P, int M>
void group32(const uint8_t* panel, const uint8_t* levels, int64_t nb, const Group& gr) {
  constexpr int kG = group_bytes32<W>();
  constexpr bool kSigned = W == DType::Q8_0;
  constexpr bool kCorr = W == DType::Q4_0 || W == DType::Q5_0;
  const int m = M ? M : gr.m;
  const Act& act = gr.act;
  alignas(64) int32_t cbuf[2][kTok * 16];
  __m512 acc[kTok];
  zero(acc);
  const int8_t* a = gr.a();
  TilePipe<P, kSigned> pipe;
  auto dot = [&](int64_t b) {
    const uint8_t* bt = kSigned ? panel + b * kG : levels + b * kUnpacked32;
    pipe.issue(a + 32 * b, gr.a_stride, bt, cbuf[b & 1]);
  };
  dot(0);
  if (nb > 1)
    dot(1);
  else
    pipe.flush();
  for (int64_t b = 0; b < nb; ++b) {
    // Two units ahead: unit b + 2 multiplies, unit b + 1 is stored, unit b is read.
    if (b + 2 < nb)
      dot(b + 2);
    else if (b + 1 < nb)
      pipe.flush();
    const uint8_t* g = panel + b * kG;
    const int32_t* c = cbuf[b & 1];
    const __m512 dw = load_half16(g + d_offset32<W>());
    TS_UNROLL
    for (int i = 0; i < kTok; ++i) {
      if (i >= m) break;
      __m512i s = load_c(c + 16 * i);
      if constexpr (kCorr) s = _mm512_add_epi32(s, _mm512_set1_epi32(act.at(act.corr, gr.t + i)[b]));
      const __m512 dxw = _mm512_mul_ps(dw, _mm512_set1_ps(act.at(act.d, gr.t + i)[b]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), dxw, acc[i]);
      if constexpr (has_min32<W>()) {
        constexpr int kM = m_offset32<W>();
        acc[i] = _mm512_fmadd_ps(load_half16(g + kM), _mm512_set1_ps(act.at(act.s, gr.t + i)[b]), acc[i]);
      }
    }
  }
  gr.store(acc, m);
}

// Q4_K / Q5_K: the 8 sub-block sums of a 256-block by tiles, then tile_kxx's arithmetic:
// isum = sum_j sc[j] * dot_j, the mins through the activations' sub-block sums.
template <DType W, class P, int M>
void group_k45(const uint8_t* panel, const uint8_t* levels, int64_t nsb, const Group& gr) {
  constexpr int kG = W == DType::Q4_K ? pq4_k::kBytes : pq5_k::kBytes;
  constexpr int kSc = pq4_k::kSc, kMn = pq4_k::kMn, kD = pq4_k::kD, kDmin = pq4_k::kDmin;
  static_assert(kSc == pq5_k::kSc && kMn == pq5_k::kMn && kD == pq5_k::kD && kDmin == pq5_k::kDmin);
  const int m = M ? M : gr.m;
  const Act& act = gr.act;
  alignas(64) int32_t cbufs[2][8][kTok * 16];
  __m512 acc[kTok];
  zero(acc);
  const int8_t* a = gr.a();
  TilePipe<P, false> pipe;
  auto dots = [&](int64_t sb) {
    for (int j = 0; j < 8; ++j)
      pipe.issue(a + 256 * sb + 32 * j, gr.a_stride, levels + sb * kUnpackedK + 512 * j, cbufs[sb & 1][j]);
  };
  dots(0);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    // The next block's tiles run while this one's integer work does; its first issue
    // stores this block's last unit.
    if (sb + 1 < nsb)
      dots(sb + 1);
    else
      pipe.flush();
    const uint8_t* g = panel + sb * kG;
    const auto& cbuf = cbufs[sb & 1];
    __m512i sc[8];
    TS_UNROLL
    for (int j = 0; j < 8; ++j)
      sc[j] = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kSc + 16 * j)));
    const __m512 d = load_half16(g + kD), dmin = load_half16(g + kDmin);
    TS_UNROLL
    for (int i = 0; i < kTok; ++i) {
      if (i >= m) break;
      __m512i isum = _mm512_setzero_si512();
      TS_UNROLL
      for (int j = 0; j < 8; ++j) isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(load_c(cbuf[j] + 16 * i), sc[j]));
      const int16_t* xs = act.at(act.xs, gr.t + i) + 8 * sb;
      __m512i imin = _mm512_setzero_si512();
      TS_UNROLL
      for (int p = 0; p < 4; ++p) {
        const __m512i mn = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + kMn + 32 * p)));
        int32_t pair;
        std::memcpy(&pair, xs + 2 * p, 4);
        imin = _mm512_dpwssd_epi32(imin, mn, _mm512_set1_epi32(pair));
      }
      const __m512 dx = _mm512_set1_ps(act.at(act.d, gr.t + i)[sb]);
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, dx), acc[i]);
      acc[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dmin, dx), acc[i]);
    }
  }
  gr.store(acc, m);
}

template <DType W, class P, int M>
void group(const uint8_t* panel, const uint8_t* levels, int64_t nb, const Group& gr) {
  if constexpr (W == DType::Q4_K || W == DType::Q5_K)
    group_k45<W, P, M>(panel, levels, nb, gr);
  else
    group32<W, P, M>(panel, levels, nb, gr);
}

// Fewer tokens than this go to the VNNI tiles. Measured on a Xeon with AMX
// (docs/BENCHMARKS.md, AMX): Q8_0 multiplies its panel as it is and gains from one group of
// 16 tokens on; the other types first unpack the panel's levels, which pays off from two
// groups on (at 16 tokens they were 0.9-1.0x the VNNI kernels, at 32 1.15-1.25x).
template <DType W>
constexpr int min_tokens() {
  return W == DType::Q8_0 ? kTok : 2 * kTok;
}

template <class P>
bool verified();

// The tile kernel proper (gemm() checks verified() first).
template <DType W, class P>
void run(const uint8_t* panel, int n_rows, const Act& act, int t0, int nt, float* y, int64_t ys) {
  constexpr bool kK = W == DType::Q4_K || W == DType::Q5_K;
  const int64_t nb = act.n_cols / (kK ? kQKK : kQK);
  const uint8_t* levels = nullptr;
  if constexpr (W != DType::Q8_0) {
    uint8_t* buf = thread_scratch(Scratch::kUnpackedLevels, nb * (kK ? kUnpackedK : kUnpacked32));
    avx512::unpack_levels(W, panel, nb, buf);
    levels = buf;
  }
  // One configuration for every group: loading one (ldtilecfg) costs as much as a few
  // units of work, and a last group of fewer tokens configured its own shape in every call
  // (and the next call the full shape again): 11% of a Q8_0 prompt's time on a 110M model.
  configure<P>(kTok, 32);
  for (int t = t0; t < t0 + nt; t += kTok) {
    const int m = std::min(kTok, t0 + nt - t);
    if (m == kTok) {
      group<W, P, kTok>(panel, levels, nb, Group{act, t, m, y, ys, n_rows, act.at(act.qs, t), act.tok_bytes});
      continue;
    }
    thread_local std::vector<int8_t> pad;
    const size_t row = size_t(act.n_cols);
    pad.assign(row * kTok, 0);
    for (int i = 0; i < m; ++i) std::memcpy(pad.data() + i * row, act.at(act.qs, t + i), row);
    group<W, P, 0>(panel, levels, nb, Group{act, t, m, y, ys, n_rows, pad.data(), int64_t(row)});
  }
}

template <DType W, class P>
void gemm(const uint8_t* panel, int64_t rb, int n_rows, const Act& act, int t0, int nt, float* y, int64_t ys) {
  if (nt < min_tokens<W>() || !verified<P>()) return avx512::quant_gemm(W)(panel, rb, n_rows, act, t0, nt, y, ys);
  run<W, P>(panel, n_rows, act, t0, nt, y, ys);
}

// The kernels of type t: the checked entry point, or the tile kernel proper.
template <class P, bool kChecked>
PanelGemmFn quant_gemm_of(DType t) {
  auto pick = [&]<DType W>() -> PanelGemmFn {
    if constexpr (kChecked)
      return gemm<W, P>;
    else
      return [](const uint8_t* panel, int64_t, int n_rows, const Act& act, int t0, int nt, float* y, int64_t ys) {
        run<W, P>(panel, n_rows, act, t0, nt, y, ys);
      };
  };
  switch (t) {
    case DType::Q8_0:
      return pick.template operator()<DType::Q8_0>();
    case DType::Q4_0:
      return pick.template operator()<DType::Q4_0>();
    case DType::Q4_1:
      return pick.template operator()<DType::Q4_1>();
    case DType::Q5_0:
      return pick.template operator()<DType::Q5_0>();
    case DType::Q5_1:
      return pick.template operator()<DType::Q5_1>();
    case DType::Q4_K:
      return pick.template operator()<DType::Q4_K>();
    case DType::Q5_K:
      return pick.template operator()<DType::Q5_K>();
    default:
      return nullptr;
  }
}

constexpr DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K};

// Once per process and tile machine, before the first tile multiply: the tile kernel of
// every type against the VNNI one on a panel of random weights and 16 + 3 tokens. This
// path could not be run on real AMX hardware where it was written (docs/BENCHMARKS.md), so
// a CPU on which it disagrees gets a warning and the VNNI kernels, not wrong logits.
template <class P>
bool verified() {
  static const bool ok = [] {
    for (DType t : kTypes) {
      if (agrees_with_vnni(t, quant_gemm_of<P, false>(t))) continue;
      TS_LOG_WARN("the AMX kernel of %s disagrees with the AVX-512 one on this CPU: AMX is not used "
                  "(please report; TIERSERVE_ISA=avx512 silences this)",
                  dtype_name(t));
      return false;
    }
    return true;
  }();
  return ok;
}

}  // namespace

bool agrees_with_vnni(DType t, PanelGemmFn kernel) {
  constexpr int kTokens = kTok + 3, kRows = kPanelRows;
  constexpr int64_t kCols = 512;
  Rng rng(0x5eed ^ uint64_t(t));
  const int64_t rb = row_bytes(t, kCols);
  std::vector<uint8_t> rows(size_t(rb * kRows));
  std::vector<float> x(size_t(kTokens * kCols));
  for (int r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) x[size_t(c)] = rng.normal();
    ref::from_float(t, x.data(), rows.data() + r * rb, kCols);
  }
  for (float& v : x) v = rng.normal();
  std::vector<uint8_t> panel(size_t(panel_bytes(t, kCols)) + 64);
  uint8_t* p = panel.data() + ((64 - (reinterpret_cast<uintptr_t>(panel.data()) & 63)) & 63);
  pack_panel(t, rows.data(), rb, kRows, kCols, p);
  ActBuffer ab;
  const Act& act = ab.prepare(t, x.data(), kCols, kCols, kTokens, nullptr);
  std::vector<float> want(size_t(kTokens * kRows)), got(want.size(), -1.0f);
  avx512::quant_gemm(t)(p, rb, kRows, act, 0, kTokens, want.data(), kRows);
  kernel(p, rb, kRows, act, 0, kTokens, got.data(), kRows);
  return std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0;
}

PanelGemmFn quant_gemm(DType t) { return quant_gemm_of<HwTiles, true>(t); }
PanelGemmFn emulated_gemm(DType t) { return quant_gemm_of<EmuTiles, true>(t); }

}  // namespace ts::kernels::amx
