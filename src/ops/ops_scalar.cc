// The scalar row of the ops table (dispatch.h): the reference every SIMD row is tested
// against, and the path of CPUs without AVX2. Plain loops, no intrinsics.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp16.h"
#include "attn_tiled_ref.h"
#include "ops_internal.h"

namespace ts::ops::detail {
namespace {

void attention_head_scalar_from(const float* q, const KvCache& kv, int layer, int kv_head,
                           const KvSeqView& seq, int64_t n_kv, float scale, float* out,
                           uint16_t* scratch, int64_t begin) {
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  uint16_t* q16 = scratch;
  uint16_t* acc = scratch + dk;
  for (int d = 0; d < dk; ++d) q16[d] = f32_to_fp16(q[d]);
  std::memset(acc, 0, size_t(dv) * sizeof(uint16_t));
  float m = -std::numeric_limits<float>::infinity();
  float s_sum = 0.0f;
  for (int64_t p = begin; p < n_kv; ++p) {
    const int64_t cell = seq.cell(p);
    const uint16_t* k = kv.k(layer, cell) + int64_t(kv_head) * dk;
    const uint16_t* v = kv.v(layer, cell) + int64_t(kv_head) * dv;
    double dot = 0.0;
    for (int d = 0; d < dk; ++d) dot += double(fp16_to_f32(k[d]) * fp16_to_f32(q16[d]));
    const float s = float(dot) * scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > m) {
      ms = std::exp(m - s);
      m = s;
      for (int d = 0; d < dv; ++d) acc[d] = f32_to_fp16(fp16_to_f32(acc[d]) * ms);
    } else {
      vs = std::exp(s - m);
    }
    for (int d = 0; d < dv; ++d) acc[d] = f32_to_fp16(fp16_to_f32(acc[d]) + fp16_to_f32(v[d]) * vs);
    s_sum = s_sum * ms + vs;
  }
  const float inv = s_sum == 0.0f ? 0.0f : 1.0f / s_sum;
  for (int d = 0; d < dv; ++d) out[d] = fp16_to_f32(acc[d]) * inv;
}

}  // namespace

void sum_squares8_scalar(const float* x, int64_t stride, int64_t n, double* sum) {
  for (int64_t i = 0; i < n; ++i) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const float v = x[k * stride + i];
      sum[k] += double(v * v);
    }
  }
}

void to_f16_scalar(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

void swiglu_scalar(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu(g[i]) * u[i];
}

void geglu_tanh_f16_scalar(const float* table, const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    if (x <= -10.0f) {
      y[i] = 0.0f;
    } else if (x >= 10.0f) {
      y[i] = x * u[i];
    } else {
      y[i] = table[f32_to_fp16(x)] * u[i];
    }
  }
}

double exp_shifted_scalar(const float* x, int64_t n, float shift, float scale, float cut, float* y,
                          int64_t block, double* block_sums) {
  double total = 0.0;
  const int64_t bl = block_sums ? block : std::max<int64_t>(n, 1);
  for (int64_t b0 = 0, bi = 0; b0 < n; b0 += bl, ++bi) {
    double s = 0.0;
    for (int64_t i = b0; i < std::min(n, b0 + bl); ++i) {
      const float e = x[i] >= cut ? std::exp((x[i] - shift) * scale) : 0.0f;
      if (y) y[i] = e;
      s += double(e);
    }
    if (block_sums) block_sums[bi] = s;
    total += s;
  }
  return total;
}

void attention_head_scalar(const float* q, const KvCache& kv, int layer, int kv_head, const KvSeqView& seq,
                           int64_t n_kv, float scale, float* out, uint16_t* scratch) {
  attention_head_scalar_from(q, kv, layer, kv_head, seq, n_kv, scale, out, scratch, 0);
}

void attention_group_scalar(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                            int kv_head, const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                            const int64_t* kv_begin) {
  for (int i = 0; i < n_q; ++i)
    attention_head_scalar_from(q[i], kv, layer, kv_head, seq, n_kv[i], scale, out[i], scratch,
                               kv_begin ? kv_begin[i] : 0);
}

// kTiledF32, one lane at a time (attn_tiled_ref.h; attn_tiled_avx2.cc compiles the same
// code with AVX2 and FMA).
void attention_tiled_ref(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                         const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale,
                         float* const* out) {
  tiled_ref::attention(q, n_kv, kv_begin, n_q, kv, layer, kv_head, seq, scale, out);
}

}  // namespace ts::ops::detail
