// Projections of a batch of activations by weight matrices, through kernels::matmul (one
// kernel for any number of tokens, so batched and token-by-token evaluation agree bit for
// bit), plus the helpers the forward passes share to keep thread-pool dispatches few.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/thread_pool.h"
#include "kernels/matmul.h"

namespace ts::engine {

// Jobs touching fewer bytes than this run on the calling thread: waking the pool costs
// more than the work (tiny models, short contexts).
inline constexpr int64_t kMinParallelBytes = 64 << 10;

// fn(ith, nth) on every thread of the pool, or fn(0, 1) here when `work_bytes` is small.
template <typename F>
void run_sized(ThreadPool& pool, int64_t work_bytes, const F& fn) {
  if (work_bytes < kMinParallelBytes || pool.n_threads() == 1) {
    fn(0, 1);
    return;
  }
  struct Args {
    const F* fn;
  } args{&fn};
  pool.run([&args](int ith, int nth) { (*args.fn)(ith, nth); });
}

// Where Matrix::pack gets its panels while a model loads. Model::load installs one (a
// mapped pack file, engine/pack_file.h) around Architecture::prepare, so the architectures
// keep calling Matrix::pack unchanged; `tierserve build` installs one that records what was
// packed. The hook is per thread: prepare runs on the loading thread.
class PackHook {
 public:
  virtual ~PackHook() = default;
  // Prebuilt panels for w (kernels::PackedWeight::borrow's contract: packed_bytes(w) bytes,
  // 64-byte aligned, alive as long as the matrix), or nullptr to pack in memory.
  virtual const uint8_t* find(const kernels::WeightView& w) = 0;
  // Called after every pack with its result (borrowed or owned).
  virtual void packed(const kernels::WeightView& w, const kernels::PackedWeight& p) {}
};

// Installs `hook` (may be null) for this thread until destroyed; restores the previous one.
class ScopedPackHook {
 public:
  explicit ScopedPackHook(PackHook* hook);
  ~ScopedPackHook();
  ScopedPackHook(const ScopedPackHook&) = delete;
  ScopedPackHook& operator=(const ScopedPackHook&) = delete;

 private:
  PackHook* prev_;
};

// A weight matrix as the forward pass uses it: the view into the mapped file and, after
// pack(), the kernels' interleaved panels: a copy in RAM (faster decode, costs the
// matrix's size) or, with a pack file, a view into that file's mapping.
class Matrix {
 public:
  Matrix() = default;
  explicit Matrix(const kernels::WeightView& v) : view_(v) {}

  const kernels::WeightView& view() const { return view_; }
  bool packed() const { return packed_; }
  // Packs in memory, or borrows prebuilt panels when the installed PackHook has them.
  void pack(ThreadPool* pool);
  // The panels (valid when packed()).
  const kernels::PackedWeight& packed_weight() const { return packed_w_; }
  // Bytes one product reads.
  uint64_t bytes() const;

  // Y (n_tok x n_rows, row stride y_stride) = X W^T, X n_tok x n_cols (row stride x_stride).
  void matmul(const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride, ThreadPool& pool) const;

 private:
  kernels::WeightView view_;
  kernels::PackedWeight packed_w_;
  bool packed_ = false;
};

// One product of matmul_many: y (n_tok x m->view().n_rows, row stride y_stride) = X m^T.
struct Product {
  const Matrix* m;
  float* y;
  int64_t y_stride;
};

// Products of the same activations X (n_tok x n_cols, row stride x_stride) by up to 4
// matrices (Q/K/V, gate/up) in one dispatch on the pool (kernels::matmul_many), every
// output bit-identical to Matrix::matmul. With an `epilogue` (matrices of one shape) each
// thread then calls epilogue(r0, r1) on the rows [r0, r1) of every output it finished.
// Matrices that are not packed run one Matrix::matmul each, then epilogue(0, n_rows).
void matmul_many(std::span<const Product> ps, const float* x, int64_t x_stride, int64_t n_tok, ThreadPool& pool,
                 const std::function<void(int64_t, int64_t)>& epilogue = {});

enum class GateAct {
  kSilu,      // SwiGLU (llama, qwen)
  kGeluTanh,  // GeGLU with the tanh approximation (gemma)
};

// Gated FFN input: h = act(X Wg^T) * (X Wu^T). `tmp` holds n_tok x n_ff floats; h and tmp
// have row stride n_ff.
void linear_gated(const Matrix& gate, const Matrix& up, GateAct act, const float* x, int64_t x_stride,
                  int64_t n_tok, float* h, float* tmp, ThreadPool& pool);

}  // namespace ts::engine
