// Software prefetch of the next K-quant group, for the panel kernels of every ISA (private).
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

}  // namespace
}  // namespace ts::kernels
