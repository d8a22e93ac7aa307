// The AVX-512 kernels, by file (private; call only when best_isa() is kAvx512).
#pragma once

#include "core/dtype.h"
#include "kernels/traits.h"

namespace ts::kernels::avx512 {

PanelGemmFn quant_gemm(DType t);  // gemm_avx512.cc: quantized panels
PanelGemmFn float_gemm(DType t);  // float_avx512.cc: F32/F16/BF16 rows
VecDotFn float_vec_dot(DType t);  // float_avx512.cc
ToFloatFn to_float(DType t);      // float_avx512.cc: dequantization

// The levels of a quantized panel unpacked as the tiles of many tokens consume them
// (gemm_avx512.cc; the AMX kernels load them as tiles): unsigned bytes, in 64-byte vectors
// of 16 rows x 4 consecutive columns (panel.h's word layout), the columns in order.
//   32-element types: kUnpacked32 bytes per block, columns 0..31 (Q8_0: q + 128; Q4_0/Q5_0:
//     levels before their offset; Q4_1/Q5_1: levels).
//   Q4_K/Q5_K: kUnpackedK bytes per 256-block; sub-block j (columns 32j..) at 512 j.
//   Q6_K: kUnpackedK bytes per 256-block; 16-column sub-block j = 8n + 2q + hh + 4half
//     (columns 16j) at 64 * (16 (2n + q) + 8 hh + 4 half), levels q + 32 (unsigned 6 bits).
inline constexpr int kUnpacked32 = 512, kUnpackedK = 4096;
void unpack_levels(DType t, const uint8_t* panel, int64_t n_blocks, uint8_t* out);

}  // namespace ts::kernels::avx512
