#include "engine/linear.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/traits.h"
#include "ops_internal.h"

namespace ts::engine {

namespace {
thread_local PackHook* t_pack_hook = nullptr;
}  // namespace

ScopedPackHook::ScopedPackHook(PackHook* hook) : prev_(t_pack_hook) { t_pack_hook = hook; }
ScopedPackHook::~ScopedPackHook() { t_pack_hook = prev_; }

void Matrix::pack(ThreadPool* pool) {
  const uint8_t* prebuilt = t_pack_hook ? t_pack_hook->find(view_) : nullptr;
  packed_w_ = prebuilt ? kernels::PackedWeight::borrow(view_, prebuilt) : kernels::pack(view_, pool);
  packed_ = true;
  if (t_pack_hook) t_pack_hook->packed(view_, packed_w_);
}

uint64_t Matrix::bytes() const {
  if (packed_) return packed_w_.bytes_read();
  return uint64_t(kernels::row_bytes(view_.type, view_.n_cols)) * uint64_t(view_.n_rows);
}

void Matrix::matmul(const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
                    ThreadPool& pool) const {
  if (packed_) kernels::matmul(packed_w_, x, x_stride, n_tok, y, y_stride, &pool);
  else kernels::matmul(view_, x, x_stride, n_tok, y, y_stride, &pool);
}

void linear_gated(const Matrix& gate, const Matrix& up, GateAct act, const float* x, int64_t x_stride,
                  int64_t n_tok, float* h, float* tmp, ThreadPool& pool) {
  TS_CHECK(gate.view().n_rows == up.view().n_rows && gate.view().n_cols == up.view().n_cols);
  const int64_t n_ff = gate.view().n_rows;
  gate.matmul(x, x_stride, n_tok, h, n_ff, pool);
  up.matmul(x, x_stride, n_tok, tmp, n_ff, pool);
  const int64_t n = n_tok * n_ff;
  // The activation costs an exp per element: weigh it like ~32 bytes of memory traffic.
  run_sized(pool, n * 32, [&](int ith, int nth) {
    const int64_t b = n * ith / nth, e = n * (ith + 1) / nth;
    if (act == GateAct::kSilu) {
      for (int64_t i = b; i < e; ++i) h[i] = ops::detail::silu(h[i]) * tmp[i];
    } else {
      for (int64_t i = b; i < e; ++i) h[i] = ops::detail::gelu_tanh(h[i]) * tmp[i];
    }
  });
}

}  // namespace ts::engine
