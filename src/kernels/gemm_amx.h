// The AMX-INT8 kernels (private; gemm_amx_avx512.cc).
#pragma once

#include "core/dtype.h"
#include "kernels/traits.h"

namespace ts::kernels::amx {

// Quantized panel kernels on AMX tiles (call only when best_isa() is kAmx); fewer than 16
// tokens go to the AVX-512 kernels. Null for types without one.
PanelGemmFn quant_gemm(DType t);

// The same kernels with every tile instruction executed in software (needs AVX-512 VNNI
// only): for tests of the tile code on CPUs without AMX. Bit-identical to quant_gemm.
PanelGemmFn emulated_gemm(DType t);

}  // namespace ts::kernels::amx
