// Per-type kernel traits: one table row per tensor type, chosen at run time by CPU features.
//
// For every type there is a plain reference (namespace ref, obviously correct, used by
// tests), a portable scalar kernel, and AVX2 / AVX-512 versions where they pay (plus AMX
// tile kernels for the matrix products of many tokens of the quantized types). A dot
// product takes a weight row in its own format and an activation row already converted to
// the type's `vec_dot_type` (F32 for F32, F16 for F16, BF16 for BF16, Q8_0 for Q4_0/Q5_0/
// Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants), exactly as llama.cpp does, so results
// agree with it to rounding.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ts::kernels {

// kAmx: the AVX-512 kernels plus AMX-INT8 tile multiplies for many tokens.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };
const char* isa_name(Isa isa);

using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);
// Dot product of n elements (n a multiple of block_size): w in the row type, x in vec_dot_type.
using VecDotFn = float (*)(int64_t n, const void* w, const void* x);

struct Act;  // activations prepared for the matrix kernels (private to the layer)
// The matrix kernel: Y[t][r] for tokens [t0, t0+nt) and the rows of one 16-row panel
// (packed, see panel.h; for F32/F16/BF16 the first row, rows row_bytes apart). Used by
// matmul.h; every (row, token) result is computed by the same arithmetic whatever the
// number of tokens, so batching never changes a result.
using PanelGemmFn = void (*)(const uint8_t* panel, int64_t row_bytes, int n_rows, const Act& act, int t0,
                             int nt, float* y, int64_t y_stride);

struct TypeTraits {
  DType type;
  int64_t block_size;
  int64_t type_size;
  DType vec_dot_type;
  ToFloatFn to_float;      // dequantize
  FromFloatFn from_float;  // quantize (the weights of the model maker; activations)
  VecDotFn vec_dot;
  PanelGemmFn gemm;  // matrix kernel (internal; use matmul.h)
  Isa isa;           // the path of this row (gaps filled from lower paths)
};

// Whether `t` has kernels (F32, F16, BF16, Q8_0, Q8_1, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K, Q8_K).
bool is_supported(DType t);

// The traits of the best path this CPU runs (see core/cpu_features.h). Requires is_supported.
const TypeTraits& traits(DType t);
// The traits of one path, for tests and benchmarks; falls back to the next lower path where
// a type has no kernel of that ISA. Requires is_supported.
const TypeTraits& traits_for(DType t, Isa isa);
// The best ISA this CPU runs.
Isa best_isa();

// Bytes of a row of n elements of type t (n a multiple of the block size).
int64_t row_bytes(DType t, int64_t n);

// Numerics: all paths of a quantized type compute the same integer block sums and combine
// them with the same float operations in the same order (scalar, AVX2, AVX-512 and AMX agree
// bit for bit, and vec_dot equals matvec). F32/F16/BF16 accumulate in 16 lanes over the
// columns (lane = column mod 16) with fused multiply-adds, then add the lanes pairwise
// (i with i+8, then i+4, i+2, i+1), again the same on every path.

// Plain reference implementations (slow, obviously correct). Tests compare every path
// against these.
namespace ref {
void to_float(DType t, const void* src, float* dst, int64_t n);
void from_float(DType t, const float* src, void* dst, int64_t n);
// Dequantizes both sides to float and accumulates in double.
double vec_dot(DType t, int64_t n, const void* w, const void* x);
}  // namespace ref

}  // namespace ts::kernels
