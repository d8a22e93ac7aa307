#include "engine/linear.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/traits.h"
#include "ops/ops.h"

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

void matmul_many(std::span<const Product> ps, const float* x, int64_t x_stride, int64_t n_tok, ThreadPool& pool,
                 const std::function<void(int64_t, int64_t)>& epilogue) {
  constexpr size_t kMax = 4;
  TS_CHECK(!ps.empty() && ps.size() <= kMax);
  bool packed = true;
  for (const Product& p : ps) packed = packed && p.m->packed();
  if (!packed) {
    for (const Product& p : ps) p.m->matmul(x, x_stride, n_tok, p.y, p.y_stride, pool);
    if (epilogue && n_tok > 0) epilogue(0, ps[0].m->view().n_rows);
    return;
  }
  kernels::MatmulJob jobs[kMax];
  for (size_t i = 0; i < ps.size(); ++i) jobs[i] = {&ps[i].m->packed_weight(), ps[i].y, ps[i].y_stride};
  kernels::matmul_many(std::span<const kernels::MatmulJob>(jobs, ps.size()), x, x_stride, n_tok, &pool, epilogue);
}

void linear_gated(const Matrix& gate, const Matrix& up, GateAct act, const float* x, int64_t x_stride,
                  int64_t n_tok, float* h, float* tmp, ThreadPool& pool) {
  TS_CHECK(gate.view().n_rows == up.view().n_rows && gate.view().n_cols == up.view().n_cols);
  const int64_t n_ff = gate.view().n_rows;
  // Both products in one dispatch; each thread applies the activation (elementwise) to the
  // rows it computed.
  const Product ps[] = {{&gate, h, n_ff}, {&up, tmp, n_ff}};
  matmul_many(ps, x, x_stride, n_tok, pool, [&](int64_t r0, int64_t r1) {
    for (int64_t t = 0; t < n_tok; ++t) {
      float* ht = h + t * n_ff;
      const float* ut = tmp + t * n_ff;
      if (act == GateAct::kSilu) {
        ops::swiglu(ht + r0, ut + r0, ht + r0, r1 - r0);
      } else {
        ops::geglu_tanh(ht + r0, ut + r0, ht + r0, r1 - r0);
      }
    }
  });
}

}  // namespace ts::engine
