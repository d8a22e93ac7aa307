#include "ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "dispatch.h"
#include "ops_internal.h"

namespace ts::ops {

namespace {

void rms_norm_scale(const float* x, const float* w, float* y, int64_t n, float eps, double sum) {
  const float mean = float(sum / double(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
  }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  rms_norm_scale(x, w, y, n, eps, sum);
}

void rms_norm_rows(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n_rows,
                   int64_t n, float eps) {
  constexpr int kRows = 8;  // independent chains in flight (measured 3.4x one row at a time)
  const OpsRow& row = active_ops();
  int64_t r = 0;
  for (; r + kRows <= n_rows; r += kRows) {
    const float* xr = x + r * x_stride;
    double sum[kRows] = {};
    row.sum_squares8(xr, x_stride, n, sum);
    for (int k = 0; k < kRows; ++k)
      rms_norm_scale(xr + k * x_stride, w, y + (r + k) * y_stride, n, eps, sum[k]);
  }
  for (; r < n_rows; ++r) rms_norm(x + r * x_stride, w, y + r * y_stride, n, eps);
}

void rope_table(const RopeConfig& c, int32_t pos, float* cs) {
  const float theta_scale = std::pow(c.freq_base, -2.0f / float(c.n_rot));
  float theta = float(pos);
  for (int i = 0; i < c.n_rot / 2; ++i) {
    const float ff = c.freq_factors ? c.freq_factors[i] : 1.0f;
    const float th = c.freq_scale * (theta / ff);
    cs[2 * i] = std::cos(th);
    cs[2 * i + 1] = std::sin(th);
    theta *= theta_scale;
  }
}

void rope_apply(const RopeConfig& c, const float* cs, float* x) {
  const int half = c.n_rot / 2;
  if (c.neox) {
    for (int i = 0; i < half; ++i) {
      const float x0 = x[i], x1 = x[i + half];
      const float co = cs[2 * i], si = cs[2 * i + 1];
      x[i] = x0 * co - x1 * si;
      x[i + half] = x0 * si + x1 * co;
    }
  } else {
    for (int i = 0; i < half; ++i) {
      const float x0 = x[2 * i], x1 = x[2 * i + 1];
      const float co = cs[2 * i], si = cs[2 * i + 1];
      x[2 * i] = x0 * co - x1 * si;
      x[2 * i + 1] = x0 * si + x1 * co;
    }
  }
}


const char* attn_numerics_name(AttnNumerics n) {
  switch (n) {
    case AttnNumerics::kTiledF32: return "tiled";
    case AttnNumerics::kFlashF16: return "on";
    case AttnNumerics::kSoftmaxF16: return "off";
  }
  return "?";
}

bool parse_attn_numerics(std::string_view name, AttnNumerics* out) {
  for (AttnNumerics n : {AttnNumerics::kTiledF32, AttnNumerics::kFlashF16, AttnNumerics::kSoftmaxF16})
    if (name == attn_numerics_name(n)) {
      *out = n;
      return true;
    }
  return false;
}


double exp_shifted(const float* x, int64_t n, float shift, float scale, float cut, float* y, int64_t block,
                   double* block_sums) {
  TS_CHECK(n >= 0 && (!block_sums || block > 0));
  return active_ops().exp_shifted(x, n, shift, scale, cut, y, block, block_sums);
}

// llama.cpp without flash attention. Three passes over the keys (max, sum, output) so no
// buffer of n_kv scores is needed; this path is for matching, not speed.
static void attention_head_softmax_f16(const float* q, const KvCache& kv, int layer, int kv_head,
                                const KvSeqView& seq, int64_t n_kv, float scale, float* out,
                                uint16_t* scratch, int64_t begin = 0) {
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  uint16_t* q16 = scratch;
  for (int d = 0; d < dk; ++d) q16[d] = f32_to_fp16(q[d]);
  auto score = [&](int64_t p) {
    const uint16_t* k = kv.k(layer, seq.cell(p)) + int64_t(kv_head) * dk;
    double dot = 0.0;
    for (int d = 0; d < dk; ++d) dot += double(fp16_to_f32(k[d]) * fp16_to_f32(q16[d]));
    return float(dot) * scale;
  };
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t p = begin; p < n_kv; ++p) m = std::max(m, score(p));
  double sum = 0.0;
  for (int64_t p = begin; p < n_kv; ++p) sum += double(std::exp(score(p) - m));
  const float inv = float(1.0 / sum);
  double acc[512];
  TS_CHECK(dv <= 512);
  for (int d = 0; d < dv; ++d) acc[d] = 0.0;
  for (int64_t p = begin; p < n_kv; ++p) {
    const float prob = fp16_to_f32(f32_to_fp16(std::exp(score(p) - m) * inv));
    const uint16_t* v = kv.v(layer, seq.cell(p)) + int64_t(kv_head) * dv;
    for (int d = 0; d < dv; ++d) acc[d] += double(prob * fp16_to_f32(v[d]));
  }
  for (int d = 0; d < dv; ++d) out[d] = float(acc[d]);
}

void attention_head(const float* q, const KvCache& kv, int layer, int kv_head,
                    const KvSeqView& seq, int64_t n_kv, float scale, float* out, uint16_t* scratch,
                    AttnNumerics numerics) {
  if (numerics == AttnNumerics::kSoftmaxF16) {
    attention_head_softmax_f16(q, kv, layer, kv_head, seq, n_kv, scale, out, scratch);
    return;
  }
  if (numerics == AttnNumerics::kTiledF32) {
    // `scratch` is too small for the AVX-512 kernel (a group's): at most the AVX2 row's,
    // which needs none and gives the same bits.
    const OpsIsa isa = std::min(best_ops_isa(), OpsIsa::kAvx2);
    ops_row(isa).tiled_group(&q, &n_kv, nullptr, 1, kv, layer, kv_head, seq, scale, &out, nullptr);
    return;
  }
  active_ops().flash_head(q, kv, layer, kv_head, seq, n_kv, scale, out, scratch);
}

void attention_group(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                     int kv_head, const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                     AttnNumerics numerics, const int64_t* kv_begin) {
  TS_CHECK(n_q >= 1 && n_q <= kMaxGroupQueries);
  if (numerics == AttnNumerics::kSoftmaxF16) {
    for (int i = 0; i < n_q; ++i)
      attention_head_softmax_f16(q[i], kv, layer, kv_head, seq, n_kv[i], scale, out[i], scratch,
                                 kv_begin ? kv_begin[i] : 0);
    return;
  }
  if (numerics == AttnNumerics::kTiledF32) {
    active_ops().tiled_group(q, n_kv, kv_begin, n_q, kv, layer, kv_head, seq, scale, out, scratch);
    return;
  }
  active_ops().flash_group(q, n_kv, n_q, kv, layer, kv_head, seq, scale, out, scratch, kv_begin);
}

void attention_seq(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale,
                   uint16_t* scratch, AttnNumerics numerics) {
  TS_CHECK(n_q >= 0 && n_q <= kMaxSeqQueries);
  if (n_q == 0) return;
  const OpsRow& row = active_ops();
  if (numerics == AttnNumerics::kFlashF16 && row.flash_seq(qs, n_q, kv, layer, seq, scale)) return;
  if (numerics == AttnNumerics::kTiledF32 && row.tiled_seq(qs, n_q, kv, layer, seq, scale, scratch)) return;
  // Runs of one kv head, as attention_group calls.
  for (int i = 0; i < n_q;) {
    const float* q[kMaxGroupQueries];
    float* out[kMaxGroupQueries];
    int64_t n_kv[kMaxGroupQueries];
    int n = 0;
    const int32_t h = qs[i].kv_head;
    for (; i < n_q && n < kMaxGroupQueries && qs[i].kv_head == h; ++i, ++n) {
      q[n] = qs[i].q;
      out[n] = qs[i].out;
      n_kv[n] = qs[i].n_kv;
    }
    attention_group(q, n_kv, n, kv, layer, h, seq, scale, out, scratch, numerics);
  }
}

void attention_head_ref(const float* q, const KvCache& kv, int layer, int kv_head,
                        const KvSeqView& seq, int64_t n_kv, float scale, float* out) {
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  std::vector<double> w(static_cast<size_t>(n_kv));
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t p = 0; p < n_kv; ++p) {
    const uint16_t* k = kv.k(layer, seq.cell(p)) + int64_t(kv_head) * dk;
    double dot = 0.0;
    for (int d = 0; d < dk; ++d) dot += double(q[d]) * double(fp16_to_f32(k[d]));
    w[size_t(p)] = dot * scale;
    mx = std::max(mx, w[size_t(p)]);
  }
  double sum = 0.0;
  for (auto& x : w) sum += (x = std::exp(x - mx));
  for (int d = 0; d < dv; ++d) {
    double o = 0.0;
    for (int64_t p = 0; p < n_kv; ++p)
      o += w[size_t(p)] * double(fp16_to_f32(kv.v(layer, seq.cell(p))[int64_t(kv_head) * dv + d]));
    out[d] = float(o / sum);
  }
}

void to_f16(const float* x, uint16_t* y, int64_t n) { active_ops().to_f16(x, y, n); }

void swiglu(const float* g, const float* u, float* y, int64_t n) { active_ops().swiglu(g, u, y, n); }

void geglu_tanh(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = detail::gelu_tanh(g[i]) * u[i];
}

// gelu(x) of every F16 value x, as float: entry h is f16(gelu(f16_to_f32(h))).
const float* detail::gelu_f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(size_t(1) << 16);
    for (uint32_t h = 0; h < (1u << 16); ++h)
      t[h] = fp16_to_f32(f32_to_fp16(detail::gelu_tanh(fp16_to_f32(uint16_t(h)))));
    return t;
  }();
  return table.data();
}

void geglu_tanh_f16(const float* g, const float* u, float* y, int64_t n) {
  active_ops().geglu_f16(detail::gelu_f16_table(), g, u, y, n);
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace ts::ops
