#include "dispatch.h"

#include "core/cpu_features.h"
#include "ops_internal.h"

namespace ts::ops {
namespace {

// Adapters to the rows' uniform signatures.
void tiled_group_scalar(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                        const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale, float* const* out,
                        uint16_t*) {
  detail::attention_tiled_ref(q, n_kv, kv_begin, n_q, kv, layer, kv_head, seq, scale, out);
}
void tiled_group_avx2(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q, const KvCache& kv,
                      int layer, int kv_head, const KvSeqView& seq, float scale, float* const* out, uint16_t*) {
  detail::attention_tiled_avx2(q, n_kv, kv_begin, n_q, kv, layer, kv_head, seq, scale, out);
}
bool no_flash_seq(const AttnQuery*, int, const KvCache&, int, const KvSeqView&, float) { return false; }
bool no_tiled_seq(const AttnQuery*, int, const KvCache&, int, const KvSeqView&, float, uint16_t*) { return false; }

// The AVX-512 kernels cover the common head sizes; the others run the AVX2 code.
void flash_group_avx512(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer, int kv_head,
                        const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                        const int64_t* kv_begin) {
  if (!detail::attention_group_avx512(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, kv_begin))
    detail::attention_group_avx2(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, scratch, kv_begin);
}
void tiled_group_avx512(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                        const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale, float* const* out,
                        uint16_t* scratch) {
  if (!detail::attention_tiled_avx512(q, n_kv, kv_begin, n_q, kv, layer, kv_head, seq, scale, out, scratch))
    detail::attention_tiled_avx2(q, n_kv, kv_begin, n_q, kv, layer, kv_head, seq, scale, out);
}

bool flash_seq_avx512(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                      float scale) {
  return detail::attention_seq_avx512(qs, n_q, kv, layer, seq, scale) ||
         detail::attention_seq_avx2(qs, n_q, kv, layer, seq, scale);
}

constexpr OpsRow kRows[kNumOpsIsas] = {
    {OpsIsa::kScalar, detail::sum_squares8_scalar, detail::to_f16_scalar, detail::swiglu_scalar,
     detail::geglu_tanh_f16_scalar, detail::exp_shifted_scalar, detail::attention_head_scalar,
     detail::attention_group_scalar, tiled_group_scalar, no_flash_seq, no_tiled_seq},
    {OpsIsa::kAvx2, detail::sum_squares8_avx2, detail::to_f16_avx2, detail::swiglu_avx2, detail::geglu_tanh_f16_avx2,
     detail::exp_shifted_scalar, detail::attention_head_avx2, detail::attention_group_avx2, tiled_group_avx2,
     detail::attention_seq_avx2, no_tiled_seq},
    {OpsIsa::kAvx512, detail::sum_squares8_avx2, detail::to_f16_avx2, detail::swiglu_avx512,
     detail::geglu_tanh_f16_avx2, detail::exp_shifted_avx512, detail::attention_head_avx2, flash_group_avx512,
     tiled_group_avx512, flash_seq_avx512, detail::attention_tiled_seq_avx512},
};

}  // namespace

const char* ops_isa_name(OpsIsa isa) {
  switch (isa) {
    case OpsIsa::kScalar: return "scalar";
    case OpsIsa::kAvx2: return "avx2";
    case OpsIsa::kAvx512: return "avx512";
  }
  return "?";
}

const OpsRow& ops_row(OpsIsa isa) { return kRows[size_t(isa)]; }

OpsIsa best_ops_isa() {
  static const OpsIsa best = [] {
    const CpuFeatures& f = cpu_features();
    if (f.avx512 && f.avx2) return OpsIsa::kAvx512;
    if (f.avx2) return OpsIsa::kAvx2;
    return OpsIsa::kScalar;
  }();
  return best;
}

const OpsRow& active_ops() {
  static const OpsRow& row = ops_row(best_ops_isa());
  return row;
}

}  // namespace ts::ops
