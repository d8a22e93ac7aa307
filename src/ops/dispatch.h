// The ops' ISA table, as kernels/traits.h is the matrix kernels': one row of function
// pointers per instruction set, the scalar row the reference every other row is tested
// against (ops_dispatch_test.cc), the row in use chosen once from the CPU's features
// (which TIERSERVE_ISA caps). A row borrows the row below it for an op it has no code of
// its own for (AVX-512 uses the AVX2 F16 conversion, for instance), and an AVX-512 kernel
// that declines a head size falls back to the AVX2 one inside the row, so a caller never
// asks twice.
//
// What a row must equal the scalar row in, per op: to_f16, sum_squares8, geglu_f16 and
// tiled_group bit for bit; swiglu within a few ulps (the vector exp; AVX-512 == AVX2 bit
// for bit); exp_shifted within 2 ulps (a float exp); flash_head / flash_group to F32
// rounding of the F16 accumulator's steps (AVX-512 == AVX2 bit for bit, and a group ==
// its queries one at a time in every row).
#pragma once

#include <cstdint>

#include "ops/kv_cache.h"
#include "ops/ops.h"

namespace ts::ops {

enum class OpsIsa : uint8_t { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr int kNumOpsIsas = 3;
const char* ops_isa_name(OpsIsa isa);

struct OpsRow {
  OpsIsa isa = OpsIsa::kScalar;
  // rms_norm_rows: the sums of squares (in double, each in its row's order) of 8 rows
  // `stride` floats apart.
  void (*sum_squares8)(const float* x, int64_t stride, int64_t n, double* sum);
  void (*to_f16)(const float* x, uint16_t* y, int64_t n);
  void (*swiglu)(const float* g, const float* u, float* y, int64_t n);
  // geglu_tanh_f16 with its table of F16 GELU values.
  void (*geglu_f16)(const float* table, const float* g, const float* u, float* y, int64_t n);
  double (*exp_shifted)(const float* x, int64_t n, float shift, float scale, float cut, float* y, int64_t block,
                        double* block_sums);
  // kFlashF16, one query (attention_head's contract).
  void (*flash_head)(const float* q, const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, int64_t n_kv,
                     float scale, float* out, uint16_t* scratch);
  // kFlashF16, queries of one kv head (attention_group's contract).
  void (*flash_group)(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer, int kv_head,
                      const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                      const int64_t* kv_begin);
  // kTiledF32, queries of one kv head. `scratch` holds attention_group_scratch_halves
  // halves; the scalar and AVX2 rows need none (null is fine there).
  void (*tiled_group)(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                      const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale,
                      float* const* out, uint16_t* scratch);
  // attention_seq's whole-sequence kernels; false (nothing done) where the row has none
  // for this shape, and the caller runs the queries as groups.
  bool (*flash_seq)(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale);
  bool (*tiled_seq)(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale,
                    uint16_t* scratch);
};

// The row of `isa` (only meaningful on a CPU that has it: see best_ops_isa).
const OpsRow& ops_row(OpsIsa isa);
// The best row the CPU (as TIERSERVE_ISA caps it) runs.
OpsIsa best_ops_isa();
const OpsRow& active_ops();

}  // namespace ts::ops
