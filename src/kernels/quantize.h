// Float -> block quantizers (private to the kernels layer).
//
// Activation quantizers (Q8_0, Q8_1, Q8_K) round exactly as llama.cpp's reference
// quantizers (quantize_row_q8_0_ref & co.), so logits match llama.cpp's. Weight quantizers
// (Q4_0 .. Q6_K) are for the model maker's test models: valid blocks of reasonable quality
// (the K-quants search scales and mins), not bit-identical with llama.cpp's.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/traits.h"

namespace ts::kernels {

void quantize_f32(const float* x, void* y, int64_t n);
void quantize_f16(const float* x, void* y, int64_t n);
void quantize_bf16(const float* x, void* y, int64_t n);
void quantize_q4_0(const float* x, void* y, int64_t n);
void quantize_q4_1(const float* x, void* y, int64_t n);
void quantize_q5_0(const float* x, void* y, int64_t n);
void quantize_q5_1(const float* x, void* y, int64_t n);
void quantize_q8_0(const float* x, void* y, int64_t n);
void quantize_q8_1(const float* x, void* y, int64_t n);
void quantize_q4_k(const float* x, void* y, int64_t n);
void quantize_q5_k(const float* x, void* y, int64_t n);
void quantize_q6_k(const float* x, void* y, int64_t n);
void quantize_q8_k(const float* x, void* y, int64_t n);

// The quantizer of a supported type, nullptr otherwise.
FromFloatFn quantizer(DType t);

// Round half to even for |v| < 2^22 — llama.cpp's nearest_int(), written as the float
// addition it is, so it does not depend on the FP rounding mode of libm calls.
inline int nearest_int(float v) {
  const float biased = v + 12582912.0f;  // 1.5 * 2^23: the sum's last bit is the integer
  int32_t i;
  __builtin_memcpy(&i, &biased, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

}  // namespace ts::kernels
