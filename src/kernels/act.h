// Activations prepared once per matvec/matmul call for one weight type (private).
//
// A float activation row is converted to the weight type's vec_dot_type exactly as
// llama.cpp would (quantize.h), then laid out for the panel kernels as separate arrays per
// token, plus the integer sums the kernels need to correct offset levels (a Q4_0 level is
// q - 8, so sum((q - 8) * x) = sum(q * x) - 8 * sum(x)). Every array of token t sits at the
// token-0 pointer plus t * tok_bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/traits.h"

namespace ts::kernels {

struct Act {
  DType wtype = DType::F32;  // the weight type these activations were prepared for
  int64_t n_cols = 0;
  int n_tok = 0;
  int64_t tok_bytes = 0;  // stride between tokens in every array below

  // F32/F16/BF16 weights: the activations as float, already rounded to F16/BF16.
  const float* xf = nullptr;
  // Quantized weights (vec_dot_type Q8_0, Q8_1 or Q8_K):
  const int8_t* qs = nullptr;     // n_cols levels
  const float* d = nullptr;       // scale per block (32 or 256 elements)
  const int32_t* corr = nullptr;  // Q4_0/Q5_0/Q8_0: -offset * sum(q) per 32-block with
                                  // offset 8/16/128; Q6_K: -32 * sum(q) per 16 elements
  const float* s = nullptr;       // Q4_1/Q5_1: Q8_1's s = fp16(d * sum(q)), as float
  const int16_t* xs = nullptr;    // Q4_K/Q5_K: sum(q) per 32-element sub-block

  // Q8_0/Q8_1 activations of several tokens, also interleaved for the AVX-512 panel tiles
  // (null otherwise): tokens in groups of kTileTokens, and per group and 32-block b one
  // record of kTileBlockBytes at tiles + (group * n_blocks + b) * kTileBlockBytes:
  //   qs[slot][32] (int8), then d[slot] (float), then corr[slot] (int32; Q8_1: s as
  //   float), slot = token - kTileTokens * group.
  // A tile of the tokens of one group then addresses all of them from one pointer.
  // Slots past the last token are zero. (10 tokens: as many as a tile keeps in registers.)
  static constexpr int kTileTokens = 10;
  static constexpr int kTileBlockBytes = kTileTokens * (32 + 4 + 4);
  static constexpr int kTileD = kTileTokens * 32, kTileAux = kTileD + 4 * kTileTokens;
  const uint8_t* tiles = nullptr;

  // Q8_K activations of several tokens, interleaved likewise for the AVX-512 K-quant tiles
  // (null otherwise): groups of kKTileTokens tokens, per group and 256-block one record of
  // kKTileBlockBytes at ktiles + (group * n_blocks + b) * kKTileBlockBytes:
  //   qs[slot][256] (int8), d[slot] (float), xs[slot][8] (int16, sum(q) per 32),
  //   corr16[slot][16] (int32, -32 * sum(q) per 16), padding to a multiple of 64 bytes.
  // Slots past the last token are zero.
  static constexpr int kKTileTokens = 8;
  static constexpr int kKTileD = kKTileTokens * 256, kKTileXs = kKTileD + 4 * kKTileTokens,
                       kKTileCorr = kKTileXs + 16 * kKTileTokens,
                       kKTileBlockBytes = (kKTileCorr + 64 * kKTileTokens + 63) / 64 * 64;
  const uint8_t* ktiles = nullptr;

  template <typename T>
  const T* at(const T* p, int t) const {
    return reinterpret_cast<const T*>(reinterpret_cast<const uint8_t*>(p) + t * tok_bytes);
  }
};

// Owns the memory of an Act; reused across calls to avoid allocation.
class ActBuffer {
 public:
  // Converts n_tok rows of x (row stride x_stride floats) for weights of type wtype.
  // Rows are converted in parallel on `pool` when there are several (pool may be null).
  const Act& prepare(DType wtype, const float* x, int64_t x_stride, int64_t n_cols, int n_tok,
                     ThreadPool* pool);

 private:
  std::vector<uint8_t> buf_;
  Act act_;
};

// Row converters of one ISA; all ISAs produce identical bytes, the SIMD ones just faster:
// llama.cpp's x86 activation quantizer (d = amax / 127, q = x * (127 / amax) rounded half
// to even), not its reference one (q = x * (1 / d) rounded half away, ref::from_float),
// which differs near rounding boundaries. n is a multiple of the block size.
struct ActRowFns {
  // Q8_0 levels and scales (as float) per 32-block, corr = -offset * sum(q).
  void (*q8_0)(const float* x, int64_t n, int offset, int8_t* qs, float* d, int32_t* corr);
  // Q8_1: as Q8_0 plus s = fp16(d * sum(q)) as float.
  void (*q8_1)(const float* x, int64_t n, int8_t* qs, float* d, float* s);
  // Q8_K: levels, d per 256; corr16 = -32 * sum(q) per 16; xs = sum(q) per 32.
  void (*q8_k)(const float* x, int64_t n, int8_t* qs, float* d, int32_t* corr16, int16_t* xs);
  // x rounded to F16 / BF16 (round to nearest even) and back to float.
  void (*round_f16)(const float* x, int64_t n, float* out);
  void (*round_bf16)(const float* x, int64_t n, float* out);
};

// The converters of a path (a lower one where the ISA has none; isa capped at best_isa()).
const ActRowFns& act_row_fns(Isa isa);
const ActRowFns* act_row_fns_avx512();  // act_avx512.cc
const ActRowFns* act_row_fns_avx2();    // act_avx2.cc

// The offset of the unsigned level a panel kernel multiplies for a type using Q8_0
// activations (Q4_0: 8, Q5_0: 16, Q8_0: 128 as the AVX-512 kernel flips the sign bit).
int act_offset(DType wtype);

}  // namespace ts::kernels
