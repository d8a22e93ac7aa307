// What each ISA file provides (private). A member left null means "this ISA has no kernel
// of its own for the type": traits.cc then uses the next lower ISA's (the fallback map).
#pragma once

#include "core/dtype.h"
#include "kernels/traits.h"

namespace ts::kernels {

struct IsaKernels {
  ToFloatFn to_float = nullptr;
  VecDotFn vec_dot = nullptr;
  PanelGemmFn gemm = nullptr;
};

IsaKernels scalar_kernels(DType t);  // complete for every supported type
IsaKernels avx2_kernels(DType t);    // call only when cpu_features().avx2
IsaKernels avx512_kernels(DType t);  // call only when cpu_features().avx512_vnni
IsaKernels amx_kernels(DType t);     // call only when cpu_features().amx_int8 as well

}  // namespace ts::kernels
