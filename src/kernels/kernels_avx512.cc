// The AVX-512 and AMX rows of the dispatch table (kernels_impl.h).
#include "core/cpu_features.h"
#include "gemm_amx.h"
#include "gemm_avx512.h"
#include "kernels_impl.h"

namespace ts::kernels {

IsaKernels avx512_kernels(DType t) {
  IsaKernels k;
  k.to_float = avx512::to_float(t);
  k.vec_dot = avx512::float_vec_dot(t);
  k.gemm = avx512::quant_gemm(t);
  if (!k.gemm) k.gemm = avx512::float_gemm(t);
  return k;
}

IsaKernels amx_kernels(DType t) {
  IsaKernels k;
  k.gemm = cpu_features().amx_emulated ? amx::emulated_gemm(t) : amx::quant_gemm(t);
  return k;
}

}  // namespace ts::kernels
