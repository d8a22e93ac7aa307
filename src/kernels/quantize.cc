// Float -> block quantizers. See quantize.h for which ones must match llama.cpp exactly.
#include "quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "quant_blocks.h"

namespace ts::kernels {
namespace {

float h2f(uint16_t h) { return fp16_to_f32(h); }
uint16_t f2h(float f) { return f32_to_fp16(f); }

// The element of largest magnitude (its sign matters to the symmetric formats).
float signed_absmax(const float* x, int n) {
  float amax = 0, v = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      v = x[i];
    }
  }
  return v;
}

// Symmetric block with an offset: q = round(x / d) + offset in [0, qmax]; d = v / -offset
// for v the element of largest magnitude, so that element maps exactly to q = 0.
void quantize_symmetric(const float* x, int n, int offset, int qmax, uint16_t* d_out, uint8_t* q) {
  const float v = signed_absmax(x, n);
  const uint16_t dh = f2h(v / float(-offset));
  *d_out = dh;
  const float d = h2f(dh);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = uint8_t(std::clamp(nearest_int(x[i] * id) + offset, 0, qmax));
}

// Asymmetric block: x ~ d * q + m with q in [0, qmax], m = min(x).
void quantize_affine(const float* x, int n, int qmax, uint16_t* d_out, uint16_t* m_out, uint8_t* q) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  *d_out = f2h((hi - lo) / float(qmax));
  *m_out = f2h(lo);
  const float d = h2f(*d_out), m = h2f(*m_out);
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = uint8_t(std::clamp(nearest_int((x[i] - m) * id), 0, qmax));
}

// Weighted least-squares fit of x ~ scale * L - min over a grid of trial scales, with
// L in [0, nmax] and min >= 0 (the formats store the min as a positive offset). Returns the
// scale; *min_out gets the min, L the levels.
float fit_scale_min(const float* x, const float* w, int n, int nmax, uint8_t* L, float* min_out) {
  float xmin = x[0], xmax = x[0];
  for (int i = 1; i < n; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  if (xmin > 0) xmin = 0;
  if (xmax <= xmin) {
    std::fill(L, L + n, 0);
    *min_out = -xmin;
    return 0.0f;
  }
  float best_err = INFINITY, best_scale = 0, best_min = -xmin;
  uint8_t trial[kQKK];
  for (int step = 0; step <= 20; ++step) {
    const float iscale = (float(nmax) - 1.0f + 0.1f * float(step)) / (xmax - xmin);
    double sw = 0, sl = 0, sll = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - xmin)), 0, nmax);
      trial[i] = uint8_t(l);
      sw += w[i];
      sl += w[i] * l;
      sll += w[i] * l * l;
      sx += w[i] * x[i];
      slx += w[i] * l * x[i];
    }
    // Solve for value = s * l + b.
    double s = 0, b = 0;
    const double det = sw * sll - sl * sl;
    if (det > 0) {
      s = (sw * slx - sl * sx) / det;
      b = (sll * sx - sl * slx) / det;
    }
    if (b > 0 || det <= 0) {
      b = 0;
      s = sll > 0 ? slx / sll : 0;
    }
    if (s < 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * trial[i] + b - x[i];
      err += w[i] * e * e;
    }
    if (err < best_err) {
      best_err = float(err);
      best_scale = float(s);
      best_min = float(-b);
      std::memcpy(L, trial, size_t(n));
    }
  }
  if (best_err == INFINITY) {  // no usable trial: plain min/max grid
    best_scale = (xmax - xmin) / float(nmax);
    best_min = -xmin;
    for (int i = 0; i < n; ++i) L[i] = uint8_t(std::clamp(nearest_int((x[i] - xmin) / best_scale), 0, nmax));
  }
  *min_out = best_min;
  return best_scale;
}

// Weighted least-squares fit of x ~ scale * l with l in [-nmax, nmax-1] (scale may be
// negative, so the element of largest magnitude can use level -nmax).
float fit_scale_symmetric(const float* x, const float* w, int n, int nmax) {
  const float v = signed_absmax(x, n);
  if (v == 0) return 0.0f;
  float best_scale = v / float(-nmax), best = -1;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(float(nmax) + 0.1f * float(step)) / v;
    double slx = 0, sll = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      slx += w[i] * x[i] * l;
      sll += w[i] * l * l;
    }
    // The error of the least-squares scale is sum(w x^2) - slx^2 / sll: maximize slx^2/sll.
    if (sll > 0 && slx * slx / sll > best) {
      best = float(slx * slx / sll);
      best_scale = float(slx / sll);
    }
  }
  return best_scale;
}

// Importance weights of a super-block: favour large elements, never zero.
void kquant_weights(const float* x, float* w) {
  double sum2 = 0;
  for (int i = 0; i < kQKK; ++i) sum2 += double(x[i]) * x[i];
  const float av = float(std::sqrt(sum2 / kQKK));
  for (int i = 0; i < kQKK; ++i) w[i] = av + std::fabs(x[i]) + 1e-30f;
}

// Scales and mins of the 8 sub-blocks of a Q4_K/Q5_K super-block, quantized to 6 bits,
// then the levels recomputed against the quantized values.
void quantize_kx_superblock(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales12,
                            uint8_t* L) {
  float w[kQKK], scale[8], mn[8];
  kquant_weights(x, w);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    scale[j] = fit_scale_min(x + 32 * j, w + 32 * j, 32, nmax, L + 32 * j, &mn[j]);
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, mn[j]);
  }
  *d_out = f2h(max_scale / 63.0f);
  *dmin_out = f2h(max_min / 63.0f);
  const float d = h2f(*d_out), dmin = h2f(*dmin_out);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = uint8_t(d > 0 ? std::clamp(nearest_int(scale[j] / d), 0, 63) : 0);
    m[j] = uint8_t(dmin > 0 ? std::clamp(nearest_int(mn[j] / dmin), 0, 63) : 0);
  }
  pack_scale_min_k4(sc, m, scales12);
  for (int j = 0; j < 8; ++j) {
    const float ds = d * float(sc[j]), dm = dmin * float(m[j]);
    for (int i = 0; i < 32; ++i) {
      const float v = x[32 * j + i];
      L[32 * j + i] = uint8_t(ds > 0 ? std::clamp(nearest_int((v + dm) / ds), 0, nmax) : 0);
    }
  }
}

}  // namespace

void quantize_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }

void quantize_f16(const float* x, void* y, int64_t n) {
  auto* o = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) o[i] = f32_to_fp16(x[i]);
}

void quantize_bf16(const float* x, void* y, int64_t n) {
  auto* o = static_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(x[i]);
}

void quantize_q4_0(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    uint8_t q[kQK];
    quantize_symmetric(x, kQK, 8, 15, &b[i].d, q);
    for (int j = 0; j < 16; ++j) b[i].qs[j] = uint8_t(q[j] | (q[j + 16] << 4));
  }
}

void quantize_q4_1(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ4_1*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    uint8_t q[kQK];
    quantize_affine(x, kQK, 15, &b[i].d, &b[i].m, q);
    for (int j = 0; j < 16; ++j) b[i].qs[j] = uint8_t(q[j] | (q[j + 16] << 4));
  }
}

namespace {
// Low nibbles as Q4_0 (element j and j+16 share byte j), fifth bits in a 32-bit mask.
void pack_q5(const uint8_t* q, uint8_t* qs, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
    h |= uint32_t(q[j] >> 4) << j;
    h |= uint32_t(q[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(qh, &h, 4);
}
}  // namespace

void quantize_q5_0(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ5_0*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    uint8_t q[kQK];
    quantize_symmetric(x, kQK, 16, 31, &b[i].d, q);
    pack_q5(q, b[i].qs, b[i].qh);
  }
}

void quantize_q5_1(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ5_1*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    uint8_t q[kQK];
    quantize_affine(x, kQK, 31, &b[i].d, &b[i].m, q);
    pack_q5(q, b[i].qs, b[i].qh);
  }
}

// llama.cpp quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d) (half away from zero).
void quantize_q8_0(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    for (int j = 0; j < kQK; ++j) b[i].qs[j] = int8_t(std::round(x[j] * id));
  }
}

// llama.cpp quantize_row_q8_1_ref: as Q8_0, plus s = fp16(d * sum(q)).
void quantize_q8_1(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_1*>(y);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    float amax = 0;
    for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    b[i].d = f2h(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      b[i].qs[j] = int8_t(std::round(x[j] * id));
      sum += b[i].qs[j];
    }
    b[i].s = f2h(float(sum) * d);
  }
}

void quantize_q4_k(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ4_K*>(y);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    uint8_t L[kQKK];
    quantize_kx_superblock(x, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) b[i].qs[32 * c + l] = uint8_t(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

void quantize_q5_k(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ5_K*>(y);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    uint8_t L[kQKK];
    quantize_kx_superblock(x, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int a = L[64 * c + l], h = L[64 * c + 32 + l];
        b[i].qs[32 * c + l] = uint8_t((a & 0xF) | ((h & 0xF) << 4));
        b[i].qh[l] |= uint8_t(((a >> 4) << (2 * c)) | ((h >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ6_K*>(y);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    float w[kQKK], scale[16];
    kquant_weights(x, w);
    float max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; ++j) {
      scale[j] = fit_scale_symmetric(x + 16 * j, w + 16 * j, 16, 32);
      if (std::fabs(scale[j]) > max_abs) {
        max_abs = std::fabs(scale[j]);
        max_scale = scale[j];
      }
    }
    uint8_t L[kQKK] = {};
    if (max_abs == 0) {
      b[i].d = 0;
      std::memset(b[i].scales, 0, sizeof b[i].scales);
    } else {
      const float iscale = -128.0f / max_scale;
      b[i].d = f2h(1.0f / iscale);
      for (int j = 0; j < 16; ++j) b[i].scales[j] = int8_t(std::min(127, nearest_int(iscale * scale[j])));
      const float d = h2f(b[i].d);
      for (int j = 0; j < 16; ++j) {
        const float ds = d * float(b[i].scales[j]);
        for (int l = 0; l < 16; ++l) {
          const int q = ds != 0 ? std::clamp(nearest_int(x[16 * j + l] / ds), -32, 31) : 0;
          L[16 * j + l] = uint8_t(q + 32);
        }
      }
    }
    // Bit positions as in dequantize_q6_k (ref.cc).
    std::memset(b[i].ql, 0, sizeof b[i].ql);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int q = L[e];
      uint8_t& lo = b[i].ql[64 * h + 32 * (k & 1) + l];
      lo |= uint8_t(k < 2 ? (q & 0xF) : ((q & 0xF) << 4));
      b[i].qh[32 * h + l] |= uint8_t((q >> 4) << (2 * k));
    }
  }
}

// llama.cpp quantize_row_q8_K_ref: the element of largest magnitude maps to -127, levels
// round half to even and are capped at 127, d = 1 / iscale; an all-zero block stays zero.
void quantize_q8_k(const float* x, void* y, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(y);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    const float v = signed_absmax(x, kQKK);
    if (v == 0) {
      std::memset(&b[i], 0, sizeof b[i]);
      continue;
    }
    const float iscale = -127.0f / v;
    for (int j = 0; j < kQKK; ++j) b[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * j + l];
      b[i].bsums[j] = int16_t(sum);
    }
    b[i].d = 1.0f / iscale;
  }
}

FromFloatFn quantizer(DType t) {
  switch (t) {
    case DType::F32:
      return quantize_f32;
    case DType::F16:
      return quantize_f16;
    case DType::BF16:
      return quantize_bf16;
    case DType::Q4_0:
      return quantize_q4_0;
    case DType::Q4_1:
      return quantize_q4_1;
    case DType::Q5_0:
      return quantize_q5_0;
    case DType::Q5_1:
      return quantize_q5_1;
    case DType::Q8_0:
      return quantize_q8_0;
    case DType::Q8_1:
      return quantize_q8_1;
    case DType::Q4_K:
      return quantize_q4_k;
    case DType::Q5_K:
      return quantize_q5_k;
    case DType::Q6_K:
      return quantize_q6_k;
    case DType::Q8_K:
      return quantize_q8_k;
    default:
      return nullptr;
  }
}

}  // namespace ts::kernels
