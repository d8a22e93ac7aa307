// Portable scalar kernels. These define the numerics every SIMD path reproduces bit for
// bit (see traits.h): per block an exact integer sum, then per block and row
//   Q4_0/Q5_0/Q8_0  acc = fma(float(isum), dw * dx, acc)
//   Q4_1/Q5_1       acc = fma(float(isum), dw * dx, acc); acc = fma(mw, sx, acc)
//   Q4_K/Q5_K       acc = fma(float(sum_j sc_j * isum_j), d * dx, acc);
//                   acc = fma(float(sum_j m_j * xsum_j), -(dmin * dx), acc)
//   Q6_K            acc = fma(float(sum_j sc_j * isum_j), d * dx, acc)
// and for F32/F16/BF16 16 lane accumulators (lane = column mod 16) added pairwise.
// Levels are decoded to plain integers first, from GGUF blocks (vec_dot) or from a packed
// panel (gemm), and both go through the same block arithmetic.
#include <cmath>
#include <cstring>

#include "act.h"
#include "core/check.h"
#include "core/fp16.h"
#include "kernels_impl.h"
#include "panel.h"
#include "quant_blocks.h"

namespace ts::kernels {
namespace {

float h2f(uint16_t h) { return fp16_to_f32(h); }
uint16_t load_half(const uint8_t* p, int r) {
  uint16_t h;
  std::memcpy(&h, p + 2 * r, 2);
  return h;
}
int mask_bit(const uint8_t* mask, int bit) { return (mask[bit >> 3] >> (bit & 7)) & 1; }

// ---------------------------------------------------------------------------------------
// Float types.

template <typename W>
float load_w(const W* w, int64_t k);
template <>
float load_w<float>(const float* w, int64_t k) {
  return w[k];
}

struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};
template <>
float load_w<Half>(const Half* w, int64_t k) {
  return fp16_to_f32(w[k].bits);
}
template <>
float load_w<Bf16>(const Bf16* w, int64_t k) {
  return bf16_to_f32(w[k].bits);
}

template <typename W, typename X>
float dot16(const W* w, const X* x, int64_t n) {
  float p[16] = {};
  for (int64_t k = 0; k < n; ++k) p[k & 15] = std::fma(load_w(w, k), load_w(x, k), p[k & 15]);
  for (int i = 0; i < 8; ++i) p[i] += p[i + 8];
  for (int i = 0; i < 4; ++i) p[i] += p[i + 4];
  for (int i = 0; i < 2; ++i) p[i] += p[i + 2];
  return p[0] + p[1];
}

template <typename W>
float vec_dot_float(int64_t n, const void* w, const void* x) {
  return dot16(static_cast<const W*>(w), static_cast<const W*>(x), n);
}

template <typename W>
void gemm_float(const uint8_t* panel, int64_t row_bytes, int n_rows, const Act& act, int t0, int nt, float* y,
                int64_t y_stride) {
  for (int t = t0; t < t0 + nt; ++t) {
    const float* x = act.at(act.xf, t);
    for (int r = 0; r < n_rows; ++r)
      y[t * y_stride + r] = dot16(reinterpret_cast<const W*>(panel + r * row_bytes), x, act.n_cols);
  }
}

// ---------------------------------------------------------------------------------------
// Quantized types: one block decoded to integer levels.

struct BlockVals {
  int L[kQKK];  // Q4_0/Q5_0/Q8_0/Q6_K: signed value (q - offset); others: q
  float d = 0;  // dw, or the super-block d
  float m = 0;  // Q4_1/Q5_1: mw; K-quants: dmin
  int sc[16];   // K-quant sub-block scales
  int mn[8];    // Q4_K/Q5_K sub-block mins
};

int block_size_of(DType t) { return (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) ? kQKK : kQK; }

void decode_raw(DType t, const uint8_t* row, int64_t i, BlockVals* v) {
  switch (t) {
    case DType::Q8_0: {
      const auto& b = reinterpret_cast<const BlockQ8_0*>(row)[i];
      for (int j = 0; j < kQK; ++j) v->L[j] = b.qs[j];
      v->d = h2f(b.d);
      return;
    }
    case DType::Q4_0:
    case DType::Q4_1: {
      const uint8_t* qs;
      if (t == DType::Q4_0) {
        const auto& b = reinterpret_cast<const BlockQ4_0*>(row)[i];
        qs = b.qs;
        v->d = h2f(b.d);
      } else {
        const auto& b = reinterpret_cast<const BlockQ4_1*>(row)[i];
        qs = b.qs;
        v->d = h2f(b.d);
        v->m = h2f(b.m);
      }
      const int off = t == DType::Q4_0 ? 8 : 0;
      for (int j = 0; j < 16; ++j) {
        v->L[j] = (qs[j] & 0xF) - off;
        v->L[j + 16] = (qs[j] >> 4) - off;
      }
      return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
      const uint8_t *qs, *qh;
      if (t == DType::Q5_0) {
        const auto& b = reinterpret_cast<const BlockQ5_0*>(row)[i];
        qs = b.qs;
        qh = b.qh;
        v->d = h2f(b.d);
      } else {
        const auto& b = reinterpret_cast<const BlockQ5_1*>(row)[i];
        qs = b.qs;
        qh = b.qh;
        v->d = h2f(b.d);
        v->m = h2f(b.m);
      }
      uint32_t bits;
      std::memcpy(&bits, qh, 4);
      const int off = t == DType::Q5_0 ? 16 : 0;
      for (int j = 0; j < 16; ++j) {
        v->L[j] = ((qs[j] & 0xF) | int(((bits >> j) & 1) << 4)) - off;
        v->L[j + 16] = ((qs[j] >> 4) | int(((bits >> (j + 16)) & 1) << 4)) - off;
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const uint8_t *qs, *qh = nullptr, *scales;
      if (t == DType::Q4_K) {
        const auto& b = reinterpret_cast<const BlockQ4_K*>(row)[i];
        qs = b.qs;
        scales = b.scales;
        v->d = h2f(b.d);
        v->m = h2f(b.dmin);
      } else {
        const auto& b = reinterpret_cast<const BlockQ5_K*>(row)[i];
        qs = b.qs;
        qh = b.qh;
        scales = b.scales;
        v->d = h2f(b.d);
        v->m = h2f(b.dmin);
      }
      for (int c = 0; c < 4; ++c) {
        for (int l = 0; l < 32; ++l) {
          const int h0 = qh ? ((qh[l] >> (2 * c)) & 1) : 0, h1 = qh ? ((qh[l] >> (2 * c + 1)) & 1) : 0;
          v->L[64 * c + l] = (qs[32 * c + l] & 0xF) | (h0 << 4);
          v->L[64 * c + 32 + l] = (qs[32 * c + l] >> 4) | (h1 << 4);
        }
      }
      for (int j = 0; j < 8; ++j) scale_min_k4(j, scales, &v->sc[j], &v->mn[j]);
      return;
    }
    case DType::Q6_K: {
      const auto& b = reinterpret_cast<const BlockQ6_K*>(row)[i];
      for (int e = 0; e < kQKK; ++e) {
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        const uint8_t lo = b.ql[64 * h + 32 * (k & 1) + l];
        const int nib = k < 2 ? (lo & 0xF) : (lo >> 4);
        v->L[e] = (nib | (((b.qh[32 * h + l] >> (2 * k)) & 3) << 4)) - 32;
      }
      for (int j = 0; j < 16; ++j) v->sc[j] = b.scales[j];
      v->d = h2f(b.d);
      return;
    }
    default:
      TS_CHECK(false);
  }
}

// The same values from row r of a packed group (layout in panel.h).
void decode_packed(DType t, const uint8_t* g, int r, BlockVals* v) {
  switch (t) {
    case DType::Q8_0:
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 4; ++i) v->L[4 * j + i] = int8_t(g[pq8_0::kQs + 64 * j + 4 * r + i]);
      v->d = h2f(load_half(g + pq8_0::kD, r));
      return;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1: {
      const bool q5 = t == DType::Q5_0 || t == DType::Q5_1;
      const int off = t == DType::Q4_0 ? 8 : t == DType::Q5_0 ? 16 : 0;
      const uint8_t* hb = g + (t == DType::Q5_0 ? pq5_0::kHbit : pq5_1::kHbit);
      for (int h = 0; h < 4; ++h) {
        for (int i = 0; i < 4; ++i) {
          const uint8_t byte = g[64 * h + 4 * r + i];
          const int b0 = q5 ? mask_bit(hb + 8 * (2 * h), 4 * r + i) : 0;
          const int b1 = q5 ? mask_bit(hb + 8 * (2 * h + 1), 4 * r + i) : 0;
          v->L[4 * h + i] = ((byte & 0xF) | (b0 << 4)) - off;
          v->L[16 + 4 * h + i] = ((byte >> 4) | (b1 << 4)) - off;
        }
      }
      switch (t) {
        case DType::Q4_0:
          v->d = h2f(load_half(g + pq4_0::kD, r));
          break;
        case DType::Q4_1:
          v->d = h2f(load_half(g + pq4_1::kD, r));
          v->m = h2f(load_half(g + pq4_1::kM, r));
          break;
        case DType::Q5_0:
          v->d = h2f(load_half(g + pq5_0::kD, r));
          break;
        default:
          v->d = h2f(load_half(g + pq5_1::kD, r));
          v->m = h2f(load_half(g + pq5_1::kM, r));
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool q5 = t == DType::Q5_K;
      for (int c = 0; c < 4; ++c) {
        for (int h = 0; h < 8; ++h) {
          for (int i = 0; i < 4; ++i) {
            const uint8_t byte = g[(q5 ? pq5_k::nib(c, h) : pq4_k::nib(c, h)) + 4 * r + i];
            const int b0 = q5 ? mask_bit(g + pq5_k::hbit(c, h, 0), 4 * r + i) : 0;
            const int b1 = q5 ? mask_bit(g + pq5_k::hbit(c, h, 1), 4 * r + i) : 0;
            v->L[64 * c + 4 * h + i] = (byte & 0xF) | (b0 << 4);
            v->L[64 * c + 32 + 4 * h + i] = (byte >> 4) | (b1 << 4);
          }
        }
      }
      static_assert(pq4_k::kSc == pq5_k::kSc && pq4_k::kMn == pq5_k::kMn && pq4_k::kD == pq5_k::kD &&
                    pq4_k::kDmin == pq5_k::kDmin);
      for (int j = 0; j < 8; ++j) {
        v->sc[j] = g[pq4_k::kSc + 16 * j + r];
        v->mn[j] = g[pq4_k::kMn + 32 * (j / 2) + 2 * r + (j & 1)];
      }
      v->d = h2f(load_half(g + pq4_k::kD, r));
      v->m = h2f(load_half(g + pq4_k::kDmin, r));
      return;
    }
    case DType::Q6_K: {
      for (int n = 0; n < 2; ++n) {
        for (int q = 0; q < 2; ++q) {
          for (int h = 0; h < 8; ++h) {
            const int idx = (2 * n + q) * 8 + h;
            for (int i = 0; i < 4; ++i) {
              const uint8_t byte = g[pq6_k::nib(idx) + 4 * r + i];
              for (int half = 0; half < 2; ++half) {
                const int top = (g[pq6_k::top(idx) + 4 * r + i] >> pq6_k::top_shift(idx, half)) & 3;
                const int nib = half ? (byte >> 4) : (byte & 0xF);
                v->L[128 * n + 64 * half + 32 * q + 4 * h + i] = (nib | (top << 4)) - 32;
              }
            }
          }
        }
      }
      for (int j = 0; j < 16; ++j) v->sc[j] = int8_t(g[pq6_k::kSc + 16 * j + r]);
      v->d = h2f(load_half(g + pq6_k::kD, r));
      return;
    }
    default:
      TS_CHECK(false);
  }
}

// One block's contribution, in the canonical order.
float block_math(DType t, const BlockVals& v, const int8_t* x, float dx, float sx, float acc) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0: {
      int isum = 0;
      for (int j = 0; j < kQK; ++j) isum += v.L[j] * x[j];
      return std::fma(float(isum), v.d * dx, acc);
    }
    case DType::Q4_1:
    case DType::Q5_1: {
      int isum = 0;
      for (int j = 0; j < kQK; ++j) isum += v.L[j] * x[j];
      acc = std::fma(float(isum), v.d * dx, acc);
      return std::fma(v.m, sx, acc);
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      int isum = 0, imin = 0;
      for (int j = 0; j < 8; ++j) {
        int s = 0, xsum = 0;
        for (int l = 0; l < 32; ++l) {
          s += v.L[32 * j + l] * x[32 * j + l];
          xsum += x[32 * j + l];
        }
        isum += v.sc[j] * s;
        imin += v.mn[j] * xsum;
      }
      acc = std::fma(float(isum), v.d * dx, acc);
      return std::fma(float(imin), -(v.m * dx), acc);
    }
    case DType::Q6_K: {
      int isum = 0;
      for (int j = 0; j < 16; ++j) {
        int s = 0;
        for (int l = 0; l < 16; ++l) s += v.L[16 * j + l] * x[16 * j + l];
        isum += v.sc[j] * s;
      }
      return std::fma(float(isum), v.d * dx, acc);
    }
    default:
      TS_CHECK(false);
  }
  return 0;
}

// The activation block i of a row in vec_dot_type: levels, scale, and Q8_1's s.
void act_block(DType vdt, const void* x, int64_t i, const int8_t** q, float* dx, float* sx) {
  if (vdt == DType::Q8_0) {
    const auto& b = static_cast<const BlockQ8_0*>(x)[i];
    *q = b.qs;
    *dx = h2f(b.d);
  } else if (vdt == DType::Q8_1) {
    const auto& b = static_cast<const BlockQ8_1*>(x)[i];
    *q = b.qs;
    *dx = h2f(b.d);
    *sx = h2f(b.s);
  } else {
    const auto& b = static_cast<const BlockQ8_K*>(x)[i];
    *q = b.qs;
    *dx = b.d;
  }
}

DType vec_dot_type_of(DType t) {
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1:
      return DType::Q8_1;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return DType::Q8_K;
    default:
      return DType::Q8_0;
  }
}

template <DType T>
float vec_dot_quant(int64_t n, const void* w, const void* x) {
  const int bs = block_size_of(T);
  const DType vdt = vec_dot_type_of(T);
  BlockVals v;
  float acc = 0;
  for (int64_t i = 0; i < n / bs; ++i) {
    decode_raw(T, static_cast<const uint8_t*>(w), i, &v);
    const int8_t* q;
    float dx = 0, sx = 0;
    act_block(vdt, x, i, &q, &dx, &sx);
    acc = block_math(T, v, q, dx, sx, acc);
  }
  return acc;
}

template <DType T>
void gemm_quant(const uint8_t* panel, int64_t, int n_rows, const Act& act, int t0, int nt, float* y,
                int64_t y_stride) {
  const int bs = block_size_of(T);
  const int64_t nb = act.n_cols / bs;
  const int64_t gb = panel_block_bytes(T);
  BlockVals v;
  for (int r = 0; r < n_rows; ++r) {
    for (int t = t0; t < t0 + nt; ++t) {
      const int8_t* xq = act.at(act.qs, t);
      const float* xd = act.at(act.d, t);
      const float* xs = act.at(act.s, t);
      float acc = 0;
      for (int64_t i = 0; i < nb; ++i) {
        decode_packed(T, panel + i * gb, r, &v);
        acc = block_math(T, v, xq + i * bs, xd[i], xs[i], acc);
      }
      y[t * y_stride + r] = acc;
    }
  }
}

template <DType T>
void to_float_ref(const void* src, float* dst, int64_t n) {
  ref::to_float(T, src, dst, n);
}

template <DType T>
IsaKernels quant_entry() {
  return {to_float_ref<T>, vec_dot_quant<T>, gemm_quant<T>};
}

}  // namespace

IsaKernels scalar_kernels(DType t) {
  switch (t) {
    case DType::F32:
      return {to_float_ref<DType::F32>, vec_dot_float<float>, gemm_float<float>};
    case DType::F16:
      return {to_float_ref<DType::F16>, vec_dot_float<Half>, gemm_float<Half>};
    case DType::BF16:
      return {to_float_ref<DType::BF16>, vec_dot_float<Bf16>, gemm_float<Bf16>};
    case DType::Q4_0:
      return quant_entry<DType::Q4_0>();
    case DType::Q4_1:
      return quant_entry<DType::Q4_1>();
    case DType::Q5_0:
      return quant_entry<DType::Q5_0>();
    case DType::Q5_1:
      return quant_entry<DType::Q5_1>();
    case DType::Q8_0:
      return quant_entry<DType::Q8_0>();
    case DType::Q4_K:
      return quant_entry<DType::Q4_K>();
    case DType::Q5_K:
      return quant_entry<DType::Q5_K>();
    case DType::Q6_K:
      return quant_entry<DType::Q6_K>();
    case DType::Q8_1:
      return {to_float_ref<DType::Q8_1>, nullptr, nullptr};
    case DType::Q8_K:
      return {to_float_ref<DType::Q8_K>, nullptr, nullptr};
    default:
      return {};
  }
}

}  // namespace ts::kernels
