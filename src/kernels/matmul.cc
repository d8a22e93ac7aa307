// matvec / matmul drivers: activation conversion once per call, rows split by 16-row
// panels across threads, quantized weights packed on the fly unless pre-packed.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <sys/mman.h>  // madvise

#include "act.h"
#include "core/check.h"
#include "matmul_internal.h"
#include "kernels/traits.h"
#include "panel.h"

namespace ts::kernels {

uint8_t* thread_scratch(Scratch use, int64_t bytes) {
  thread_local std::vector<uint8_t> bufs[2];
  std::vector<uint8_t>& buf = bufs[use == Scratch::kPackedPanel ? 0 : 1];
  if (buf.size() < size_t(bytes) + 64) buf.resize(size_t(bytes) + 64);
  const uintptr_t p = reinterpret_cast<uintptr_t>(buf.data());
  return buf.data() + ((64 - (p & 63)) & 63);
}

namespace {

int64_t n_panels(int64_t n_rows) { return (n_rows + kPanelRows - 1) / kPanelRows; }

// The first of n panels of `bytes` bytes each, laid out from byte `start`, that starts at
// or after byte b.
int64_t b_clamp_first(int64_t b, int64_t start, int64_t bytes, int64_t n) {
  if (b <= start) return 0;
  return std::min<int64_t>(n, (b - start + bytes - 1) / bytes);
}

void check_view(const WeightView& w) {
  TS_CHECK(w.data != nullptr || w.n_rows == 0);
  TS_CHECK_MSG(is_supported(w.type), dtype_name(w.type));
  TS_CHECK(w.n_cols % traits(w.type).block_size == 0);
}

// Y of panels [p0, p1) of w for all tokens of `act`; `packed` may be null (pack on the fly).
void run_panels(const TypeTraits& tr, const WeightView& w, const uint8_t* packed, int64_t packed_panel_bytes,
                const Act& act, float* y, int64_t y_stride, int64_t p0, int64_t p1) {
  const int64_t rb = row_bytes(w.type, w.n_cols);
  const bool in_place = !is_panel_type(w.type);
  const int64_t pb = in_place ? 0 : panel_bytes(w.type, w.n_cols);
  const auto* data = static_cast<const uint8_t*>(w.data);
  uint8_t* scratch = (in_place || packed) ? nullptr : thread_scratch(Scratch::kPackedPanel, pb);
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
}

// Y for all tokens of `act` and every row of w; `packed` may be null (pack on the fly).
void run(const TypeTraits& tr, const WeightView& w, const uint8_t* packed, int64_t packed_panel_bytes,
         const Act& act, float* y, int64_t y_stride, ThreadPool* pool) {
  auto work = [&](int64_t p0, int64_t p1, int) {
    run_panels(tr, w, packed, packed_panel_bytes, act, y, y_stride, p0, p1);
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

void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t x_stride, int64_t n_tok, ThreadPool* pool,
                 const std::function<void(int64_t, int64_t)>& epilogue) {
  constexpr size_t kMaxJobs = 4;
  TS_CHECK(!jobs.empty() && jobs.size() <= kMaxJobs);
  TS_CHECK(n_tok >= 0 && n_tok <= (1 << 30));
  const int64_t n_cols = jobs[0].w->view().n_cols;
  const int64_t n_rows0 = jobs[0].w->view().n_rows;
  bool same_rows = true;
  for (const MatmulJob& j : jobs) {
    check_view(j.w->view());
    TS_CHECK_MSG(traits(j.w->view().type).gemm != nullptr, "not a weight type (Q8_1 and Q8_K are activation types)");
    TS_CHECK(j.w->view().n_cols == n_cols);
    same_rows = same_rows && j.w->view().n_rows == n_rows0;
  }
  TS_CHECK(!epilogue || same_rows);
  if (n_tok == 0) return;
  // Activations once per kind: jobs whose weight types convert them alike share a buffer.
  thread_local ActBuffer bufs[kMaxJobs];
  const Act* acts[kMaxJobs];
  const Isa isa = best_isa();
  for (size_t i = 0; i < jobs.size(); ++i) {
    const DType t = jobs[i].w->view().type;
    acts[i] = nullptr;
    for (size_t k = 0; k < i && !acts[i]; ++k) {
      const DType tk = jobs[k].w->view().type;
      if (traits(tk).vec_dot_type == traits(t).vec_dot_type && act_offset(tk) == act_offset(t) &&
          is_panel_type(tk) == is_panel_type(t))
        acts[i] = acts[k];
    }
    if (!acts[i]) acts[i] = &bufs[i].prepare(t, x, x_stride, n_cols, int(n_tok), pool);
  }
  // Panels of every job in one list; each thread takes a contiguous share of the bytes
  // (same_rows with an epilogue: the same panels of every job, so the rows it finishes are
  // final in every output).
  int64_t np[kMaxJobs], pbytes[kMaxJobs], total = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const WeightView& w = jobs[i].w->view();
    np[i] = n_panels(w.n_rows);
    pbytes[i] = is_panel_type(w.type) ? panel_bytes(w.type, w.n_cols) : kPanelRows * row_bytes(w.type, w.n_cols);
    total += np[i] * pbytes[i];
  }
  auto work = [&](int ith, int nth) {
    if (epilogue) {
      const int64_t p0 = np[0] * ith / nth, p1 = np[0] * (ith + 1) / nth;
      if (p0 == p1) return;
      for (size_t i = 0; i < jobs.size(); ++i) {
        const PackedWeight& w = *jobs[i].w;
        run_panels(traits_for(w.view().type, isa), w.view(), w.panels(), w.panel_bytes(), *acts[i], jobs[i].y,
                   jobs[i].y_stride, p0, p1);
      }
      epilogue(p0 * kPanelRows, std::min(n_rows0, p1 * kPanelRows));
      return;
    }
    // Panel q of job i starts at byte start_i + q * pbytes[i]; this thread runs the panels
    // starting in [lo, hi).
    const int64_t lo = total * ith / nth, hi = total * (ith + 1) / nth;
    int64_t start = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const int64_t p0 = b_clamp_first(lo, start, pbytes[i], np[i]), p1 = b_clamp_first(hi, start, pbytes[i], np[i]);
      if (p0 < p1) {
        const PackedWeight& w = *jobs[i].w;
        run_panels(traits_for(w.view().type, isa), w.view(), w.panels(), w.panel_bytes(), *acts[i], jobs[i].y,
                   jobs[i].y_stride, p0, p1);
      }
      start += np[i] * pbytes[i];
    }
  };
  if (pool && pool->n_threads() > 1 && total > 0) {
    pool->run(work);
  } else {
    work(0, 1);
  }
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
  // Large matrices (an output projection) on 2 MiB pages: decode streams them once per
  // token, and through 4 KiB pages that costs a TLB miss and a hardware-prefetcher restart
  // every 4 KiB (Gemma 3 270M's 171 MiB output projection read ~1.3x faster on THP pages).
  const size_t huge = size_t(2) << 20;
  const bool use_huge = size_t(total_bytes) >= 4 * huge;
  const size_t align = use_huge ? huge : 64;
  const size_t total = (size_t(total_bytes) + align - 1) & ~(align - 1);
  out.data_.reset(static_cast<uint8_t*>(std::aligned_alloc(align, std::max<size_t>(total, 64))));
  if (use_huge && out.data_) ::madvise(out.data_.get(), total, MADV_HUGEPAGE);
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
