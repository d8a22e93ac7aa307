// Matrix products of a quantized weight matrix with float activations.
//
// W has n_rows rows of n_cols elements in `type` (a row is contiguous, n_cols a multiple of
// the block size). Activations are converted once to the type's vec_dot_type, then every
// thread takes a range of weight rows, so each weight byte is read once per call however
// many tokens there are.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ts::kernels {

struct WeightView {
  const void* data = nullptr;
  DType type = DType::F32;
  int64_t n_cols = 0;  // elements per row (input features)
  int64_t n_rows = 0;  // rows (output features)
};

// y[r] = sum_k W[r][k] * x[k] for one token.
void matvec(const WeightView& w, const float* x, float* y, ThreadPool* pool);

// Y[t][r] = sum_k W[r][k] * X[t][k] for n_tok tokens. X is n_tok x n_cols with row stride
// x_stride (floats); Y is n_tok x n_rows with row stride y_stride.
void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tok, float* y,
            int64_t y_stride, ThreadPool* pool);

// Rows `first`..`first+n`-1 of W, dequantized to float (embedding look-up).
void dequantize_rows(const WeightView& w, int64_t first, int64_t n, float* out);

}  // namespace ts::kernels
