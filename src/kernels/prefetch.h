// Software prefetch for the panel kernels of every ISA (private): the next K-quant group,
// and the next panel's block for tiles of several tokens.
//
// During decode a K-quant tile's loop over a group (a few KiB) is long, and the
// out-of-order window alone keeps too few DRAM reads in flight, so the tiles request the
// next group's lines while computing this one. The requests are spread over the group's
// steps, a part per step: all of a group's lines requested at once fill the miss buffers
// and the core waits at the prefetches (perf, 110m Q4_K_M decode on AVX2, Zen 4: 16-19% of
// the K-quant tiles' samples sat there; spread, decode ran 1.3-1.5x faster).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ts::kernels {
namespace {  // internal linkage: included by translation units compiled for different ISAs

// Requests part `part` of kParts (consecutive runs of lines) of the kBytes at `next`.
template <int kBytes, int kParts>
inline __attribute__((always_inline)) void prefetch_part(const uint8_t* next, int part) {
  constexpr int kLines = (kBytes + 63) / 64, kPer = (kLines + kParts - 1) / kParts;
  _Pragma("GCC unroll 16") for (int i = 0; i < kPer; ++i) {
    const int line = part * kPer + i;
    if (line < kLines) _mm_prefetch(reinterpret_cast<const char*>(next + 64 * line), _MM_HINT_T0);
  }
}

// Requests every line of the kBytes at g into L2: the same block of the next panel, from
// a tile of several tokens. With several tokens a panel is compute bound, and while it runs
// the hardware prefetchers alone keep too few of the next panel's DRAM reads in flight (a
// 16-token step of Gemma 3 270M's output projection took the sum of its compute and its
// DRAM time); requested a panel ahead, the reads overlap the panel's compute. Panels are
// consecutive where they are pre-packed; past the last panel, or after a panel packed on
// the fly, the addresses are of no use but harmless (prefetches never fault).
template <int kBytes>
inline __attribute__((always_inline)) void prefetch_group_l2(const uint8_t* g) {
  _Pragma("GCC unroll 16") for (int off = 0; off < kBytes; off += 64)
    _mm_prefetch(reinterpret_cast<const char*>(g + off), _MM_HINT_T1);
}

}  // namespace
}  // namespace ts::kernels
