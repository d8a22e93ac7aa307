// Private helpers shared by the scalar and SIMD files of the ops layer.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/kv_cache.h"
#include "ops/ops.h"

namespace ts::ops::detail {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

// 1/k! for k = 11 down to 0: the Taylor series of e^r (|r| <= ln2/2) that the vector exps
// evaluate in double by Horner's rule (silu_avx2.cc, expf_avx512.h).
inline constexpr double kExpInvFact[] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320,
                                         1.0 / 5040,     1.0 / 720,     1.0 / 120,    1.0 / 24,
                                         1.0 / 6,        0.5,           1.0,          1.0};

inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoefA = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
}

// The scalar row (ops_scalar.cc): the reference of every other row (dispatch.h).
void sum_squares8_scalar(const float* x, int64_t stride, int64_t n, double* sum);
void to_f16_scalar(const float* x, uint16_t* y, int64_t n);
void swiglu_scalar(const float* g, const float* u, float* y, int64_t n);
void geglu_tanh_f16_scalar(const float* table, const float* g, const float* u, float* y, int64_t n);
void attention_head_scalar(const float* q, const KvCache& kv, int layer, int kv_head, const KvSeqView& seq,
                           int64_t n_kv, float scale, float* out, uint16_t* scratch);
void attention_group_scalar(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                            int kv_head, const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                            const int64_t* kv_begin);
// gelu(x) of every F16 value x (ops.cc): the table geglu_tanh_f16 reads.
const float* gelu_f16_table();
// AVX2 ops::geglu_tanh_f16 (gelu_avx2.cc), bit-identical to the scalar row.
void geglu_tanh_f16_avx2(const float* table, const float* g, const float* u, float* y, int64_t n);

// AVX2+F16C attention (ops_avx2.cc); same contract as ops::attention_head.
void attention_head_avx2(const float* q, const KvCache& kv, int layer, int kv_head,
                         const KvSeqView& seq, int64_t n_kv, float scale, float* out,
                         uint16_t* scratch);
void attention_group_avx2(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                          int kv_head, const KvSeqView& seq, float scale, float* const* out, uint16_t* scratch,
                          const int64_t* kv_begin = nullptr);
// attention_seq in the flash numerics for head sizes up to 256 (false otherwise): each
// query attention_head_avx2's result, the chains of all heads interleaved.
bool attention_seq_avx2(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                        float scale);
// attention_group_avx2 for head sizes 64, 128 and 256 (head_dim_k == head_dim_v) and up to
// kMaxSeqQueries queries, bit-identical, on the schedule of attention_group_avx512
// (attn_avx2.cc); false (nothing done) otherwise.
bool attention_group_avx2_wide(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                               int kv_head, const KvSeqView& seq, float scale, float* const* out,
                               const int64_t* kv_begin);
// y = std::exp(x) bit for bit, 8 at a time (attn_avx2.cc; for tests).
void expf_avx2(const float* x, float* y, int64_t n);
void to_f16_avx2(const float* x, uint16_t* y, int64_t n);
// rms_norm's sums of squares of 8 rows `stride` floats apart, each in its loop's order
// (ops_avx2.cc).
void sum_squares8_avx2(const float* x, int64_t stride, int64_t n, double* sum);
// AVX2+FMA ops::swiglu (silu_avx2.cc): in-register exp, within a few ulp of silu().
void swiglu_avx2(const float* g, const float* u, float* y, int64_t n);
// AVX-512 ops::swiglu (silu_avx512.cc): bit-identical to swiglu_avx2, 16 lanes at a time.
void swiglu_avx512(const float* g, const float* u, float* y, int64_t n);
// ops::exp_shifted with std::exp, one value at a time (ops_scalar.cc; CPUs without AVX-512).
double exp_shifted_scalar(const float* x, int64_t n, float shift, float scale, float cut, float* y, int64_t block,
                          double* block_sums);
// ops::exp_shifted with a float exp within 2 ulp, 16 at a time (softmax_avx512.cc).
double exp_shifted_avx512(const float* x, int64_t n, float shift, float scale, float cut, float* y, int64_t block,
                          double* block_sums);
// y = std::exp(x) bit for bit, 16 at a time (expf_avx512.h; for tests).
void expf_avx512(const float* x, float* y, int64_t n);
// AVX-512 version of attention_group_avx2 with bit-identical results (attn_avx512.cc), for
// head sizes 64, 128 and 256 (head_dim_k == head_dim_v); false (nothing done) otherwise.
bool attention_group_avx512(const float* const* q, const int64_t* n_kv, int n_q, const KvCache& kv, int layer,
                            int kv_head, const KvSeqView& seq, float scale, float* const* out,
                            const int64_t* kv_begin = nullptr);

// The F16 conversions of the two above: 8 lanes per instruction (k256) or 16 (k512) in all
// units; kAuto (the default) takes k512 for the units that reuse cells (prompts) unless
// CpuFeatures::avx512_split, k256 otherwise (attn_avx512.cc). The results are the same bits;
// tests and benchmarks set it to run both forms on any AVX-512 CPU.
enum class F16Width { kAuto, k256, k512 };
void set_attention_f16_width(F16Width w);

// AVX-512 attention_seq in the flash numerics (attn_avx512.cc), same head sizes as above.
bool attention_seq_avx512(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                          float scale);

// kTiledF32 (ops.h): attention_group's contract computed one lane at a time (ops_scalar.cc:
// the reference, and the path of CPUs without AVX2).
void attention_tiled_ref(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                         const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale,
                         float* const* out);
// The same compiled with AVX2 and FMA (attn_tiled_avx2.cc).
void attention_tiled_avx2(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                          const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale,
                          float* const* out);
// The same with AVX-512 (attn_avx512.cc), bit-identical; `scratch` as attention_group's.
// False (nothing done) for other head sizes than 32, 64, 80, 96, 128 and 256, or K and V
// heads of different sizes.
bool attention_tiled_avx512(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                            const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale,
                            float* const* out, uint16_t* scratch);
// attention_seq in kTiledF32 (attn_avx512.cc), the same head sizes.
bool attention_tiled_seq_avx512(const AttnQuery* qs, int n_q, const KvCache& kv, int layer, const KvSeqView& seq,
                                float scale, uint16_t* scratch);

}  // namespace ts::ops::detail
