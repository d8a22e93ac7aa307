// The AVX2 row of the dispatch table (kernels_impl.h).
#include "gemm_avx2.h"
#include "kernels_impl.h"

namespace ts::kernels {

IsaKernels avx2_kernels(DType t) {
  IsaKernels k;
  k.to_float = avx2::to_float(t);
  k.vec_dot = avx2::float_vec_dot(t);
  if (!k.vec_dot) k.vec_dot = avx2::quant_vec_dot(t);
  k.gemm = avx2::quant_gemm(t);
  if (!k.gemm) k.gemm = avx2::float_gemm(t);
  return k;
}

}  // namespace ts::kernels
