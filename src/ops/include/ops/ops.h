// The elementwise and attention primitives every architecture's forward pass is built
// from. Each follows llama.cpp's CPU rounding (noted per function) so that our logits
// agree with it to float rounding, not just "approximately".
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "ops/kv_cache.h"

namespace ts::ops {

// y = x / sqrt(mean(x^2) + eps) * w (w may be null: no weight). Squares are summed in
// double, the scale applied in float, as ggml_rms_norm + ggml_mul do. y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// rms_norm of n_rows rows (row i at x + i * x_stride, written to y + i * y_stride), each
// with exactly rms_norm's operations; rows are summed several at a time (the per-row sum
// is a serial chain of double adds, so one row at a time waits on its latency).
void rms_norm_rows(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n_rows,
                   int64_t n, float eps);

// Rotary position embedding of one head vector.
struct RopeConfig {
  int n_rot = 0;                        // rotated dimensions (even, <= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;              // 1 / linear scaling factor
  const float* freq_factors = nullptr;  // n_rot/2 divisors of theta (llama3 rope_freqs)
  bool neox = false;                    // pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
};

// cos/sin of every pair for position `pos`: cs[2i] = cos, cs[2i+1] = sin, i < n_rot/2.
// theta_i = pos * base^(-2i/n_rot), built by repeated multiplication in float like
// ggml's rope cache (the last bits of theta differ from a direct pow()).
void rope_table(const RopeConfig& c, int32_t pos, float* cs);

// Rotates the first n_rot dimensions of `x` in place with a table from rope_table.
void rope_apply(const RopeConfig& c, const float* cs, float* x);

// Which of llama.cpp's two CPU attention paths to reproduce (they round differently).
enum class AttnNumerics {
  // Flash attention (llama.cpp's default, `-fa auto/on`; the server goldens): online
  // softmax with an F16 value accumulator rounded after every key.
  kFlashF16,
  // Without flash attention (`-fa off`, llama-cpp-python's default): plain softmax in
  // F32, probabilities rounded to F16 before the product with V, accumulated in F32.
  kSoftmaxF16,
  // Flash attention in F32 over tiles of kAttnTile keys at absolute positions, as
  // llama.cpp's tiled path for prompt batches (64+ queries) works, but the same for every
  // query, so results never depend on how queries are batched. Per query and tile
  // [16t, 16t + 16) (the positions it attends to): scores s_j = tree(fma chains over
  // 16-dim chunks of q * k_j) * scale, with no F16 rounding of q; the tile's max m; when m
  // exceeds the running max M, the accumulator and the 16 per-lane weight sums are scaled
  // by exp(M - m); p_j = exp(s_j - M), added to the lane sums and fused into the F32
  // accumulator in key order. Output: accumulator / tree(lane sums). tree(x) of 16 lanes
  // adds x_l + x_(l+8), then + x_(l+4) halves, then + x_(l+2), then the last two; exp is
  // a float polynomial within 2 ulp (attn_tiled_ref.h, the definition every path follows
  // bit for bit). No F16 round trip per key: faster than kFlashF16.
  kTiledF32,
};
inline constexpr int kAttnTile = 16;
// Names as the command line and the server config spell them: "tiled" (kTiledF32), "on"
// (kFlashF16: llama.cpp's `-fa on`) and "off" (kSoftmaxF16: its `-fa off`).
const char* attn_numerics_name(AttnNumerics n);
bool parse_attn_numerics(std::string_view name, AttnNumerics* out);

// Halves a thread needs for attention_head: head_dim_k + head_dim_v.
inline int64_t attention_scratch_halves(const KvShape& s) { return int64_t(s.head_dim_k) + s.head_dim_v; }

// One query head attending to positions [0, n_kv) of a sequence's cache (causal masking is
// the caller's choice of n_kv). llama.cpp's CPU flash-attention numerics: q is rounded to
// F16, scores are F16 dot products accumulated in F32 and multiplied by `scale`, softmax
// is computed online over positions in order with an F16 value accumulator.
// `out` receives head_dim_v floats; `scratch` holds attention_scratch_halves halves.
void attention_head(const float* q, const KvCache& kv, int layer, int kv_head,
                    const KvSeqView& seq, int64_t n_kv, float scale, float* out, uint16_t* scratch,
                    AttnNumerics numerics = AttnNumerics::kFlashF16);

// Several queries attending to the same kv head of one sequence, query i to positions
// [0, n_kv[i]): every query gets exactly attention_head's result, but each K/V row is read
// and converted once for all of them (GQA groups, several prompt tokens). At most
// kMaxGroupQueries queries; `scratch` holds attention_group_scratch_halves halves.
inline constexpr int kMaxGroupQueries = 16;
inline constexpr int kAvx2AttnChunk = 8;  // keys whose scores the AVX2 kernel takes at once
inline int64_t attention_group_scratch_halves(const KvShape& s) {
  const int64_t dk = (s.head_dim_k + 15) / 16 * 16, dv = (s.head_dim_v + 15) / 16 * 16;
  // kFlashF16: the F16 accumulators, then in floats the queries, a chunk of K rows and a V row.
  const int64_t flash = kMaxGroupQueries * int64_t(s.head_dim_v) + 2 * kMaxGroupQueries * s.head_dim_k +
                        2 * kAvx2AttnChunk * (int64_t(s.head_dim_k) + 8) + 2 * int64_t(s.head_dim_v) + 64;
  // kTiledF32, in floats, 64-byte aligned: the F32 K and V rows of a tile and an
  // accumulator per query (queries of one kv head), or an accumulator, a tile's 16 scores
  // and 16 weights per query (up to 32 queries of any heads).
  constexpr int kSeqQueries = 32;  // kMaxSeqQueries
  const int64_t tiled =
      2 * std::max(kAttnTile * (dk + dv) + kMaxGroupQueries * dv, kSeqQueries * (dv + 2 * kAttnTile)) + 32;
  return std::max(flash, tiled);
}
// With kv_begin, query i attends positions [kv_begin[i], n_kv[i]) (the rows of a prompt
// past a sliding window, several in one call over the union of their windows).
void attention_group(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                     int kv_head, const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                     AttnNumerics numerics = AttnNumerics::kFlashF16, const int64_t* kv_begin = nullptr);

// One query of attention_seq.
struct AttnQuery {
  const float* q;       // head_dim_k floats
  float* out;           // head_dim_v floats
  int64_t n_kv;         // attends to positions [0, n_kv)
  int32_t kv_head;
};

// Queries of one sequence over any kv heads (decode: every head of a token in one call),
// each with exactly attention_head's result in `numerics`. Why it exists: a per-kv-head
// walk reads 2 * head_dim bytes every n_head_kv * 2 * head_dim, which the prefetchers
// follow poorly and which leaves one serial accumulator chain per walk; here each cell's
// heads are read contiguously and the queries' chains overlap. Queries of one kv head
// should be adjacent (K rows are converted once per run). At most kMaxSeqQueries;
// `scratch` holds attention_group_scratch_halves halves.
inline constexpr int kMaxSeqQueries = 32;
static_assert(kMaxSeqQueries == 32, "attention_group_scratch_halves sizes for 32");
void attention_seq(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq, float scale,
                   uint16_t* scratch, AttnNumerics numerics = AttnNumerics::kFlashF16);

// Reference attention in double (tests): plain softmax(q.k * scale) v over the same F16
// cache entries, without any F16 rounding of q or of the accumulator.
void attention_head_ref(const float* q, const KvCache& kv, int layer, int kv_head,
                        const KvSeqView& seq, int64_t n_kv, float scale, float* out);

// The exponentials of a softmax: y[i] = e^((x[i] - shift) * scale) where x[i] >= cut, else
// 0 (NaN: 0), and their sum in double; with block_sums, also the sum of every `block`
// values (block_sums[i / block]). y may be null when only the sums are wanted. Within a
// few ulp of std::exp (a float exp, 16 at a time on AVX-512): for sampling, where the
// distribution matters, not the last bit.
double exp_shifted(const float* x, int64_t n, float shift, float scale, float cut, float* y, int64_t block = 0,
                   double* block_sums = nullptr);

// F32 -> F16 (round to nearest even) of n values.
void to_f16(const float* x, uint16_t* y, int64_t n);

// y = silu(g) * u, silu(g) = g / (1 + exp(-g)). y may alias g or u.
void swiglu(const float* g, const float* u, float* y, int64_t n);

// y = gelu(g) * u with gelu's tanh approximation, as ggml_geglu. y may alias g or u.
void geglu_tanh(const float* g, const float* u, float* y, int64_t n);

// y = gelu(g) * u exactly as llama.cpp's CPU backend computes ggml_geglu (GGML_GELU_FP16):
// g <= -10 gives 0, g >= 10 gives g * u, otherwise g is rounded to F16 and its gelu (tanh
// approximation) read from a table of F16 results. The F16 rounding moves values by up to
// ~5e-4 relative against geglu_tanh; models matched token for token against llama.cpp
// (gemma3) use this one. y may alias g or u.
void geglu_tanh_f16(const float* g, const float* u, float* y, int64_t n);

// y += x
void add(float* y, const float* x, int64_t n);

}  // namespace ts::ops
