// matvec / matmul drivers: activation conversion once per call, rows split by 16-row
// panels across threads, quantized weights packed on the fly unless pre-packed.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "act.h"
#include "core/check.h"
#include "matmul_internal.h"
#include "kernels/traits.h"
#include "panel.h"

namespace ts::kernels {
namespace {

int64_t n_panels(int64_t n_rows) { return (n_rows + kPanelRows - 1) / kPanelRows; }

void check_view(const WeightView& w) {
  TS_CHECK(w.data != nullptr || w.n_rows == 0);
  TS_CHECK_MSG(is_supported(w.type), dtype_name(w.type));
  TS_CHECK(w.n_cols % traits(w.type).block_size == 0);
}

// A scratch panel per thread for packing a WeightView on the fly.
uint8_t* scratch_panel(int64_t bytes) {
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < size_t(bytes) + 64) buf.resize(size_t(bytes) + 64);
  uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - (p & 63)) & 63);
}

// Y for all tokens of `act` and every row of w; `packed` may be null (pack on the fly).
void run(const TypeTraits& tr, const WeightView& w, const uint8_t* packed, int64_t packed_panel_bytes,
         const Act& act, float* y, int64_t y_stride, ThreadPool* pool) {
  const int64_t rb = row_bytes(w.type, w.n_cols);
  const bool in_place = !is_panel_type(w.type);
  const int64_t pb = in_place ? 0 : panel_bytes(w.type, w.n_cols);
  const auto* data = static_cast<const uint8_t*>(w.data);
  auto work = [&](int64_t p0, int64_t p1, int) {
    uint8_t* scratch = (in_place || packed) ? nullptr : scratch_panel(pb);
    for (int64_t p = p0; p < p1; ++p) {
      const int rows = int(std::min<int64_t>(kPanelRows, w.n_rows - p * kPanelRows));
      const uint8_t* panel;
      if (in_place) {
        panel = data + p * kPanelRows * rb;
      } else if (packed) {
        panel = packed + p * packed_panel_bytes;
      } else {
        pack_panel(w.type, data + p * kPanelRows * rb, rb, rows, w.n_cols, scratch);
        panel = scratch;
      }
      tr.gemm(panel, rb, rows, act, 0, act.n_tok, y + p * kPanelRows, y_stride);
    }
  };
  const int64_t np = n_panels(w.n_rows);
  if (pool && pool->n_threads() > 1 && np > 1) {
    pool->parallel_for(np, 1, work);
  } else {
    work(0, np, 0);
  }
}

ActBuffer& act_buffer() {
  thread_local ActBuffer b;
  return b;
}

void matmul_impl(const WeightView& w, const uint8_t* packed, int64_t packed_panel_bytes, const float* x,
                 int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride, ThreadPool* pool) {
  matmul_isa(best_isa(), w, packed, packed_panel_bytes, x, x_stride, n_tok, y, y_stride, pool);
}

}  // namespace

void matmul_isa(Isa isa, const WeightView& w, const uint8_t* packed, int64_t packed_panel_bytes,
                const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
                ThreadPool* pool) {
  check_view(w);
  TS_CHECK_MSG(traits(w.type).gemm != nullptr, "not a weight type (Q8_1 and Q8_K are activation types)");
  TS_CHECK(n_tok >= 0 && n_tok <= (1 << 30));
  if (n_tok == 0 || w.n_rows == 0) return;
  const Act& act = act_buffer().prepare(w.type, x, x_stride, w.n_cols, int(n_tok), pool);
  run(traits_for(w.type, isa), w, packed, packed_panel_bytes, act, y, y_stride, pool);
}

void matvec(const WeightView& w, const float* x, float* y, ThreadPool* pool) {
  matmul_impl(w, nullptr, 0, x, w.n_cols, 1, y, w.n_rows, pool);
}

void matmul(const WeightView& w, const float* x, int64_t x_stride, int64_t n_tok, float* y, int64_t y_stride,
            ThreadPool* pool) {
  matmul_impl(w, nullptr, 0, x, x_stride, n_tok, y, y_stride, pool);
}

void matvec(const PackedWeight& w, const float* x, float* y, ThreadPool* pool) {
  matmul_impl(w.view(), w.panels(), w.panel_bytes(), x, w.view().n_cols, 1, y, w.view().n_rows, pool);
}

void matmul(const PackedWeight& w, const float* x, int64_t x_stride, int64_t n_tok, float* y,
            int64_t y_stride, ThreadPool* pool) {
  matmul_impl(w.view(), w.panels(), w.panel_bytes(), x, x_stride, n_tok, y, y_stride, pool);
}

void dequantize_rows(const WeightView& w, int64_t first, int64_t n, float* out) {
  check_view(w);
  TS_CHECK(first >= 0 && n >= 0 && first + n <= w.n_rows);
  const TypeTraits& tr = traits(w.type);
  const int64_t rb = row_bytes(w.type, w.n_cols);
  const auto* data = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < n; ++r) tr.to_float(data + (first + r) * rb, out + r * w.n_cols, w.n_cols);
}

void PackedWeight::Free::operator()(uint8_t* p) const { std::free(p); }

bool is_packed_type(DType t) { return is_panel_type(t); }

int64_t packed_bytes(DType t, int64_t n_rows, int64_t n_cols) {
  if (n_rows < 0 || n_cols < 0) return -1;
  if (!is_panel_type(t)) return 0;
  const auto layout = dtype_layout(uint32_t(t));
  if (!layout || n_cols % int64_t(layout->block_size) != 0) return -1;
  int64_t group_bytes = 0, total = 0;
  if (__builtin_mul_overflow(n_cols / int64_t(layout->block_size), panel_block_bytes(t), &group_bytes)) return -1;
  if (__builtin_mul_overflow(group_bytes, n_panels(n_rows), &total)) return -1;
  return total;
}

void pack_into(const WeightView& w, uint8_t* dst, ThreadPool* pool) {
  check_view(w);
  if (!is_panel_type(w.type) || w.n_rows == 0) return;
  TS_CHECK(dst != nullptr && reinterpret_cast<uintptr_t>(dst) % 64 == 0);
  const int64_t pb = kernels::panel_bytes(w.type, w.n_cols);
  const int64_t rb = row_bytes(w.type, w.n_cols);
  const auto* data = static_cast<const uint8_t*>(w.data);
  auto work = [&](int64_t p0, int64_t p1, int) {
    for (int64_t p = p0; p < p1; ++p) {
      const int rows = int(std::min<int64_t>(kPanelRows, w.n_rows - p * kPanelRows));
      pack_panel(w.type, data + p * kPanelRows * rb, rb, rows, w.n_cols, dst + p * pb);
    }
  };
  const int64_t np = n_panels(w.n_rows);
  if (pool && pool->n_threads() > 1) {
    pool->parallel_for(np, 1, work);
  } else {
    work(0, np, 0);
  }
}

PackedWeight PackedWeight::pack(const WeightView& w, ThreadPool* pool) {
  check_view(w);
  PackedWeight out;
  out.view_ = w;
  if (!is_panel_type(w.type) || w.n_rows == 0) return out;
  const int64_t total_bytes = packed_bytes(w);
  TS_CHECK(total_bytes > 0);
  const size_t total = (size_t(total_bytes) + 63) & ~size_t(63);
  out.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(total, 64))));
  TS_CHECK(out.data_ != nullptr);
  out.panels_ = out.data_.get();
  out.panel_bytes_ = kernels::panel_bytes(w.type, w.n_cols);
  pack_into(w, out.data_.get(), pool);
  return out;
}

PackedWeight PackedWeight::borrow(const WeightView& w, const uint8_t* panels) {
  check_view(w);
  PackedWeight out;
  out.view_ = w;
  if (!is_panel_type(w.type) || w.n_rows == 0) return out;
  TS_CHECK(panels != nullptr && reinterpret_cast<uintptr_t>(panels) % 64 == 0);
  out.panels_ = panels;
  out.panel_bytes_ = kernels::panel_bytes(w.type, w.n_cols);
  return out;
}

uint64_t panel_layout_fingerprint() {
  static const uint64_t fp = [] {
    // Bytes from a fixed 64-bit LCG: any layout change moves some byte somewhere else.
    constexpr int64_t kCols = 512, kRows = kPanelRows;
    uint64_t h = 0xcbf29ce484222325ull;
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K,
                    DType::Q6_K}) {
      if (!is_panel_type(t)) continue;
      const int64_t rb = row_bytes(t, kCols);
      std::vector<uint8_t> src(size_t(rb * kRows));
      for (uint8_t& b : src) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        b = uint8_t(state >> 56);
      }
      const WeightView w{src.data(), t, kCols, kRows};
      PackedWeight p = PackedWeight::pack(w, nullptr);
      const uint8_t* d = p.panels();
      for (int64_t i = 0; i < packed_bytes(w); ++i) h = (h ^ d[i]) * 0x100000001b3ull;
      h = (h ^ uint64_t(t)) * 0x100000001b3ull;
    }
    return h;
  }();
  return fp;
}

PackedWeight pack(const WeightView& w, ThreadPool* pool) { return PackedWeight::pack(w, pool); }

uint64_t PackedWeight::bytes_read() const {
  if (panels_) return uint64_t(panel_bytes_) * uint64_t(n_panels(view_.n_rows));
  return uint64_t(row_bytes(view_.type, view_.n_cols)) * uint64_t(view_.n_rows);
}

}  // namespace ts::kernels
