// The AVX2 kernels, by file (private; call only when best_isa() >= kAvx2).
#pragma once

#include "core/dtype.h"
#include "kernels/traits.h"

namespace ts::kernels::avx2 {

PanelGemmFn quant_gemm(DType t);  // gemm_avx2.cc: quantized panels
PanelGemmFn float_gemm(DType t);  // float_avx2.cc: F32/F16/BF16 rows
VecDotFn float_vec_dot(DType t);  // float_avx2.cc
VecDotFn quant_vec_dot(DType t);  // vec_dot_avx2.cc: GGUF rows of Q8_0, Q4_0
ToFloatFn to_float(DType t);      // float_avx2.cc: dequantization

}  // namespace ts::kernels::avx2
