// matmul with a chosen ISA path (private; for tests and benchmarks).
#pragma once

#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/traits.h"

namespace ts::kernels {

// As matmul(); `packed` is PackedWeight::panels() or null (pack on the fly).
void matmul_isa(Isa isa, const WeightView& w, const uint8_t* packed, int64_t packed_panel_bytes,
                const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
                ThreadPool* pool);

}  // namespace ts::kernels
