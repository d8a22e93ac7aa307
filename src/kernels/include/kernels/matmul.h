// Matrix products of a quantized weight matrix with float activations.
//
// W has n_rows rows of n_cols elements in `type` (a row is contiguous, n_cols a multiple of
// the block size). Activations are converted once to the type's vec_dot_type, then every
// thread takes a range of weight rows, so each weight byte is read once per call however
// many tokens there are.
//
// Determinism: every output Y[t][r] is computed by the same operations in the same order
// whatever n_tok, the other tokens, the thread count, the ISA path (scalar, AVX2, AVX-512, AMX)
// and whether W is a WeightView or a PackedWeight — so matmul of n tokens equals n
// matvecs bit for bit, and equals traits(type).vec_dot of the row with the converted
// activation row.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

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

// Version of the packed panel layout (src/kernels/panel.h). Bump it whenever the layout of
// any type changes: pack files (`tierserve build`) record it and are rejected as stale
// when it differs. panel_layout_fingerprint() backs it up at run time.
inline constexpr uint32_t kPanelLayoutVersion = 1;

// A hash of the panels that packing a fixed pseudo-random 16 x 512 matrix of every panel
// type produces: it changes whenever the layout changes, even if kPanelLayoutVersion was
// not bumped, so a pack file built by other code is never used with different kernels.
// Computed once (microseconds) and cached.
uint64_t panel_layout_fingerprint();

// Whether matrices of type t are packed into panels (the quantized weight types; F32,
// F16 and BF16 are used in place).
bool is_packed_type(DType t);

// Bytes of the packed panels of an n_rows x n_cols matrix of type t: 16-row panels, the
// last one padded with zero rows. 0 for types used in place; -1 for a shape that is
// invalid (n_cols not a whole number of blocks, negative) or whose size overflows int64.
int64_t packed_bytes(DType t, int64_t n_rows, int64_t n_cols);
inline int64_t packed_bytes(const WeightView& w) { return packed_bytes(w.type, w.n_rows, w.n_cols); }

// Packs w into dst (packed_bytes(w) bytes, 64-byte aligned) in parallel on `pool` (may be
// null). This is what PackedWeight::pack does into its own buffer; pack files store the
// same bytes.
void pack_into(const WeightView& w, uint8_t* dst, ThreadPool* pool = nullptr);

// W repacked once (at model load) into the interleaved 16-row layout of the matrix kernels,
// so decode does not pay for packing on every call (a WeightView is packed on the fly,
// panel by panel). Quantized types are copied (about the size of the original) unless the
// panels come prebuilt (borrow()); F32, F16 and BF16 are used in place. The WeightView's
// memory must outlive the PackedWeight.
class PackedWeight {
 public:
  PackedWeight() = default;
  // Packs the rows in parallel on `pool` (may be null) into a buffer this object owns.
  static PackedWeight pack(const WeightView& w, ThreadPool* pool = nullptr);
  // A non-owning view of panels packed earlier (a mapped pack file): `panels` holds
  // packed_bytes(w) bytes laid out as pack_into writes them, is 64-byte aligned (checked)
  // and must outlive the PackedWeight. nullptr for types used in place.
  static PackedWeight borrow(const WeightView& w, const uint8_t* panels);

  const WeightView& view() const { return view_; }
  // The packed panels, nullptr for types used in place.
  const uint8_t* panels() const { return panels_; }
  int64_t panel_bytes() const { return panel_bytes_; }
  // Whether the panels live in this object (false: borrowed, or none).
  bool owns_panels() const { return data_ != nullptr; }
  // Bytes one matvec reads from memory (for GB/s figures).
  uint64_t bytes_read() const;

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  WeightView view_;
  std::unique_ptr<uint8_t, Free> data_;
  const uint8_t* panels_ = nullptr;  // data_.get() or borrowed
  int64_t panel_bytes_ = 0;
};

// Same as PackedWeight::pack.
PackedWeight pack(const WeightView& w, ThreadPool* pool = nullptr);

void matvec(const PackedWeight& w, const float* x, float* y, ThreadPool* pool);

// One product of matmul_many: Y (n_tok x w.n_rows, row stride y_stride) = X W^T.
struct MatmulJob {
  const PackedWeight* w;
  float* y;
  int64_t y_stride;
};

// Up to 4 products of the same activations X (n_tok x n_cols, every w has n_cols columns)
// in one dispatch on the pool, the activations converted once per conversion kind (Q and K
// of an attention layer, gate and up of an FFN share one). Each output equals matmul()'s
// bit for bit. With an `epilogue` (all jobs must have the same n_rows) every thread runs
// the same rows of every job, then epilogue(r0, r1) on the rows [r0, r1) it finished:
// those rows of every output are final (a gated activation can run there, on that
// thread, without another dispatch).
void matmul_many(std::span<const MatmulJob> jobs, const float* x, int64_t x_stride, int64_t n_tok,
                 ThreadPool* pool, const std::function<void(int64_t, int64_t)>& epilogue = {});
void matmul(const PackedWeight& w, const float* x, int64_t x_stride, int64_t n_tok, float* y,
            int64_t y_stride, ThreadPool* pool);

}  // namespace ts::kernels
