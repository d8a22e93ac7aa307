// kTiledF32 (ops.h) one lane at a time: the definition that the AVX-512 kernels follow bit
// for bit. Included by ops.cc (the portable path) and attn_tiled_avx2.cc (the same code
// with AVX2 and FMA, vectorized by the compiler); each gets a copy of its own (anonymous
// namespace), compiled with its file's flags; attn_avx512.cc uses exp_neg and tree16. Multiplies and adds are never contracted into
// FMAs (both files compile with fp-contract=off or without FMA); the FMAs are std::fma.
#pragma once

#ifdef __F16C__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "ops/kv_cache.h"
#include "ops/ops.h"

namespace ts::ops {
namespace tiled_ref {
namespace {

// e^x for x <= 0 (all the softmax needs: scores minus their running max), in float: n =
// round(x log2 e), r = x - n ln2 in two FMAs, a degree-7 polynomial by FMAs (Cephes'
// expf coefficients), times 2^n. Within 2 ulp of e^x; 0 below -87.3, where e^x is under
// the normal range (and for -inf). Every step is exact given its inputs or rounds once, so
// the AVX-512 version (exp16 in attn_avx512.cc) gives the same bits.
inline constexpr float kExpMin = -87.3f;
inline constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kExpC[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

inline float exp_neg(float x) {
  if (!(x >= kExpMin)) return 0.0f;
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kExpC[0];
  for (int k = 1; k < 6; ++k) p = std::fma(p, r, kExpC[k]);
  const float r2 = r * r;
  const float y = std::fma(p, r2, r) + 1.0f;
  // y * 2^n, n >= -126: 2^n is a normal float, so the product rounds once, as ldexp would.
  uint32_t bits = uint32_t(int32_t(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, 4);
  return y * two_n;
}

// F16 -> F32 of n values (exact on every path; vcvtph2ps where the file has F16C).
inline void to_f32(const uint16_t* x, float* y, int n) {
  int d = 0;
#ifdef __F16C__
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(y + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + d))));
#endif
  for (; d < n; ++d) y[d] = fp16_to_f32(x[d]);
}

inline float tree16(const float* x) {
  float r8[8], r4[4];
  for (int l = 0; l < 8; ++l) r8[l] = x[l] + x[l + 8];
  for (int l = 0; l < 4; ++l) r4[l] = r8[l] + r8[l + 4];
  return (r4[0] + r4[2]) + (r4[1] + r4[3]);
}

inline void attention(const float* const* q, const int64_t* n_kv, const int64_t* kv_begin, int n_q,
                      const KvCache& kv, int layer, int kv_head, const KvSeqView& seq, float scale,
                      float* const* out) {
  constexpr int L = kAttnTile;
  const int dk = kv.shape().head_dim_k, dv = kv.shape().head_dim_v;
  const int dkp = (dk + L - 1) / L * L;  // zero-padded to whole chunks
  // Buffers reused across calls (this path runs per attention unit without AVX-512).
  thread_local std::vector<float> kt, vt, acc, sums, qp, mx;
  kt.assign(size_t(L * dkp), 0.0f);
  vt.assign(size_t(L * dv), 0.0f);
  acc.assign(size_t(n_q * dv), 0.0f);
  sums.assign(size_t(n_q * L), 0.0f);
  qp.assign(size_t(n_q * dkp), 0.0f);
  mx.assign(size_t(n_q), -std::numeric_limits<float>::infinity());
  for (int i = 0; i < n_q; ++i) std::memcpy(&qp[size_t(i * dkp)], q[i], size_t(dk) * sizeof(float));
  int64_t lo = n_kv[0], hi = 0;
  for (int i = 0; i < n_q; ++i) {
    lo = std::min(lo, kv_begin ? kv_begin[i] : 0);
    hi = std::max(hi, n_kv[i]);
  }
  for (int64_t p0 = lo / L * L; p0 < hi; p0 += L) {
    const int64_t a = std::max(p0, lo), b = std::min(p0 + L, hi);
    std::fill(kt.begin(), kt.end(), 0.0f);
    for (int64_t p = a; p < b; ++p) {
      const int64_t cell = seq.cell(p);
      const uint16_t* k = kv.k(layer, cell) + int64_t(kv_head) * dk;
      const uint16_t* v = kv.v(layer, cell) + int64_t(kv_head) * dv;
      to_f32(k, &kt[size_t((p - p0) * dkp)], dk);
      to_f32(v, &vt[size_t((p - p0) * dv)], dv);
    }
    for (int i = 0; i < n_q; ++i) {
      const int64_t qa = std::max(p0, kv_begin ? kv_begin[i] : 0), qb = std::min(p0 + L, n_kv[i]);
      if (qa >= qb) continue;
      float s[L];
      float m = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < L; ++j) {
        float part[L] = {};
        const bool in = p0 + j >= qa && p0 + j < qb;
        if (in)
          for (int c = 0; c < dkp; c += L)
            for (int l = 0; l < L; ++l)
              part[l] = std::fma(qp[size_t(i * dkp + c + l)], kt[size_t(j * dkp + c + l)], part[l]);
        s[j] = in ? tree16(part) * scale : -std::numeric_limits<float>::infinity();
        if (in) m = std::max(m, s[j]);
      }
      float* ai = &acc[size_t(i * dv)];
      float* si = &sums[size_t(i * L)];
      if (m > mx[size_t(i)]) {
        const float ms = exp_neg(mx[size_t(i)] - m);
        for (int d = 0; d < dv; ++d) ai[d] *= ms;
        for (int l = 0; l < L; ++l) si[l] *= ms;
        mx[size_t(i)] = m;
      }
      float e[L];
      for (int j = 0; j < L; ++j) e[j] = exp_neg(s[j] - mx[size_t(i)]);  // -inf off the range: 0
      for (int j = 0; j < L; ++j) {
        if (p0 + j < qa || p0 + j >= qb) continue;
        si[j] += e[j];
        for (int d = 0; d < dv; ++d) ai[d] = std::fma(e[j], vt[size_t(j * dv + d)], ai[d]);
      }
    }
  }
  for (int i = 0; i < n_q; ++i) {
    const float total = tree16(&sums[size_t(i * L)]);
    const float inv = total == 0.0f ? 0.0f : 1.0f / total;
    for (int d = 0; d < dv; ++d) out[i][d] = acc[size_t(i * dv + d)] * inv;
  }
}

}  // namespace
}  // namespace tiled_ref
}  // namespace ts::ops
