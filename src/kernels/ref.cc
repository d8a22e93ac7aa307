// Plain reference implementations: dequantization written straight from the block layouts
// (quant_blocks.h), and a dot product that dequantizes both sides and accumulates in
// double. Every optimized path is tested against these; they favour obviousness over speed.
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "kernels/traits.h"
#include "quant_blocks.h"
#include "quantize.h"

namespace ts::kernels {
namespace {

float h2f(uint16_t h) { return fp16_to_f32(h); }

void dequantize_f32(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = h2f(s[i]);
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = float((b[i].qs[j] & 0xF) - 8) * d;
      dst[j + 16] = float((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    for (int j = 0; j < 16; ++j) {
      dst[j] = float(b[i].qs[j] & 0xF) * d + m;
      dst[j + 16] = float(b[i].qs[j] >> 4) * d + m;
    }
  }
}

// The fifth bit of element j (0..31) of a Q5_0/Q5_1 block.
int q5_high_bit(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return int((h >> j) & 1);
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (b[i].qs[j] & 0xF) | (q5_high_bit(b[i].qh, j) << 4);
      const int q1 = (b[i].qs[j] >> 4) | (q5_high_bit(b[i].qh, j + 16) << 4);
      dst[j] = float(q0 - 16) * d;
      dst[j + 16] = float(q1 - 16) * d;
    }
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d), m = h2f(b[i].m);
    for (int j = 0; j < 16; ++j) {
      const int q0 = (b[i].qs[j] & 0xF) | (q5_high_bit(b[i].qh, j) << 4);
      const int q1 = (b[i].qs[j] >> 4) | (q5_high_bit(b[i].qh, j + 16) << 4);
      dst[j] = float(q0) * d + m;
      dst[j + 16] = float(q1) * d + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = float(b[i].qs[j]) * d;
  }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kQK; ++i, dst += kQK) {
    const float d = h2f(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = float(b[i].qs[j]) * d;
  }
}

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b[i].qs + 32 * c;
      int sc0, m0, sc1, m1;
      scale_min_k4(2 * c, b[i].scales, &sc0, &m0);
      scale_min_k4(2 * c + 1, b[i].scales, &sc1, &m1);
      for (int l = 0; l < 32; ++l) {
        dst[64 * c + l] = d * float(sc0) * float(q[l] & 0xF) - dmin * float(m0);
        dst[64 * c + 32 + l] = d * float(sc1) * float(q[l] >> 4) - dmin * float(m1);
      }
    }
  }
}

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b[i].qs + 32 * c;
      int sc0, m0, sc1, m1;
      scale_min_k4(2 * c, b[i].scales, &sc0, &m0);
      scale_min_k4(2 * c + 1, b[i].scales, &sc1, &m1);
      for (int l = 0; l < 32; ++l) {
        const int h0 = (b[i].qh[l] >> (2 * c)) & 1, h1 = (b[i].qh[l] >> (2 * c + 1)) & 1;
        dst[64 * c + l] = d * float(sc0) * float((q[l] & 0xF) | (h0 << 4)) - dmin * float(m0);
        dst[64 * c + 32 + l] = d * float(sc1) * float((q[l] >> 4) | (h1 << 4)) - dmin * float(m1);
      }
    }
  }
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK) {
    const float d = h2f(b[i].d);
    // Each half of 128 elements uses 64 bytes of ql and 32 of qh: element 128h + 32k + l
    // (k = 0..3, l = 0..31) has its low nibble in ql[64h + 32(k&1) + l] (low nibble for
    // k < 2, high for k >= 2) and its top two bits in bits 2k..2k+1 of qh[32h + l].
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      for (int k = 0; k < 4; ++k) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t lo = ql[32 * (k & 1) + l];
          const int nib = k < 2 ? (lo & 0xF) : (lo >> 4);
          const int q = nib | (((qh[l] >> (2 * k)) & 3) << 4);
          const int e = 128 * h + 32 * k + l;
          dst[e] = d * float(b[i].scales[e / 16]) * float(q - 32);
        }
      }
    }
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, dst += kQKK)
    for (int j = 0; j < kQKK; ++j) dst[j] = b[i].d * float(b[i].qs[j]);
}

}  // namespace

namespace ref {

void to_float(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      return dequantize_f32(src, dst, n);
    case DType::F16:
      return dequantize_f16(src, dst, n);
    case DType::BF16:
      return dequantize_bf16(src, dst, n);
    case DType::Q4_0:
      return dequantize_q4_0(src, dst, n);
    case DType::Q4_1:
      return dequantize_q4_1(src, dst, n);
    case DType::Q5_0:
      return dequantize_q5_0(src, dst, n);
    case DType::Q5_1:
      return dequantize_q5_1(src, dst, n);
    case DType::Q8_0:
      return dequantize_q8_0(src, dst, n);
    case DType::Q8_1:
      return dequantize_q8_1(src, dst, n);
    case DType::Q4_K:
      return dequantize_q4_k(src, dst, n);
    case DType::Q5_K:
      return dequantize_q5_k(src, dst, n);
    case DType::Q6_K:
      return dequantize_q6_k(src, dst, n);
    case DType::Q8_K:
      return dequantize_q8_k(src, dst, n);
    default:
      TS_CHECK_MSG(false, "ref::to_float: unsupported type");
  }
}

void from_float(DType t, const float* src, void* dst, int64_t n) {
  FromFloatFn f = quantizer(t);
  TS_CHECK_MSG(f != nullptr, "ref::from_float: unsupported type");
  f(src, dst, n);
}

double vec_dot(DType t, int64_t n, const void* w, const void* x) {
  std::vector<float> wf(static_cast<size_t>(n)), xf(static_cast<size_t>(n));
  to_float(t, w, wf.data(), n);
  to_float(traits(t).vec_dot_type, x, xf.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(wf[size_t(i)]) * double(xf[size_t(i)]);
  return s;
}

}  // namespace ref
}  // namespace ts::kernels
