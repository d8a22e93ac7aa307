// The AVX-512 kernels, by file (private; call only when best_isa() is kAvx512).
#pragma once

#include "core/dtype.h"
#include "kernels/traits.h"

namespace ts::kernels::avx512 {

PanelGemmFn quant_gemm(DType t);  // gemm_avx512.cc: quantized panels
PanelGemmFn float_gemm(DType t);  // float_avx512.cc: F32/F16/BF16 rows
VecDotFn float_vec_dot(DType t);  // float_avx512.cc
ToFloatFn to_float(DType t);      // float_avx512.cc: dequantization

}  // namespace ts::kernels::avx512
