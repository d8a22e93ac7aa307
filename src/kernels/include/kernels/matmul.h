// Matrix products of a quantized weight matrix with float activations.
//
// W has n_rows rows of n_cols elements in `type` (a row is contiguous, n_cols a multiple of
// the block size). Activations are converted once to the type's vec_dot_type, then every
// thread takes a range of weight rows, so each weight byte is read once per call however
// many tokens there are.
//
// Determinism: every output Y[t][r] is computed by the same operations in the same order
// whatever n_tok, the other tokens, the thread count, the ISA path (scalar, AVX2, AVX-512)
// and whether W is a WeightView or a PackedWeight — so matmul of n tokens equals n
// matvecs bit for bit, and equals traits(type).vec_dot of the row with the converted
// activation row.
#pragma once

#include <cstdint>
#include <memory>

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
void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
            ThreadPool* pool);

// Rows `first`..`first+n`-1 of W, dequantized to float (embedding look-up).
void dequantize_rows(const WeightView& w, int64_t first, int64_t n, float* out);

// W repacked once (at model load) into the interleaved 16-row layout of the matrix kernels,
// so decode does not pay for packing on every call (a WeightView is packed on the fly,
// panel by panel). Quantized types are copied (about the size of the original); F32, F16
// and BF16 are used in place. The WeightView's memory must outlive the PackedWeight.
class PackedWeight {
 public:
  PackedWeight() = default;
  // Packs the rows in parallel on `pool` (may be null).
  static PackedWeight pack(const WeightView& w, ThreadPool* pool = nullptr);

  const WeightView& view() const { return view_; }
  // The packed panels, nullptr for types used in place.
  const uint8_t* panels() const { return data_.get(); }
  int64_t panel_bytes() const { return panel_bytes_; }
  // Bytes one matvec reads from memory (for GB/s figures).
  uint64_t bytes_read() const;

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  WeightView view_;
  std::unique_ptr<uint8_t, Free> data_;
  int64_t panel_bytes_ = 0;
};

// Same as PackedWeight::pack.
PackedWeight pack(const WeightView& w, ThreadPool* pool = nullptr);

void matvec(const PackedWeight& w, const float* x, float* y, ThreadPool* pool);
void matmul(const PackedWeight& w, const float* x, int64_t x_stride, int64_t n_tok, float* y,
            int64_t y_stride, ThreadPool* pool);

}  // namespace ts::kernels
