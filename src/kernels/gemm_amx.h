// The AMX-INT8 kernels (private; gemm_amx_avx512.cc).
#pragma once

#include "core/dtype.h"
#include "kernels/traits.h"

namespace ts::kernels::amx {

// Quantized panel kernels on AMX tiles (call only when best_isa() is kAmx); fewer than 16
// tokens (32 for the types other than Q8_0, which unpack their panels first) go to the
// AVX-512 kernels, and so does everything when the self-check below failed. Null for types
// without one (Q6_K, where the VNNI kernel is faster, and the float types).
PanelGemmFn quant_gemm(DType t);

// Whether `kernel`, a panel kernel of type t, gives the bits of the AVX-512 VNNI kernel on
// a panel of random weights and 19 tokens. The AMX kernels run it on their tile code once
// per process before their first tile multiply, and fall back to VNNI (with a warning)
// when it fails.
bool agrees_with_vnni(DType t, PanelGemmFn kernel);

// The same kernels with every tile instruction executed in software (needs AVX-512 VNNI
// only): for tests of the tile code on CPUs without AMX. Bit-identical to quant_gemm.
PanelGemmFn emulated_gemm(DType t);

}  // namespace ts::kernels::amx
