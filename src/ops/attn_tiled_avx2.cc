// kTiledF32 on CPUs with AVX2 but without AVX-512: attn_tiled_ref.h compiled with AVX2 and
// FMA (at -O3, so its 16-lane loops are vectorized), bit-identical to the portable copy.
#pragma GCC optimize("fp-contract=off")
#include "attn_tiled_ref.h"
#include "ops_internal.h"

namespace ts::ops::detail {

void attention_tiled_avx2(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                          const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale,
                          float* const* out) {
  tiled_ref::attention(q, n_kv, kv_begin, n_q, kv, layer, kv_head, seq, scale, out);
}

}  // namespace ts::ops::detail
