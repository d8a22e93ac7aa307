// Packing of GGUF rows into 16-row panels (layout in panel.h).
#include <cstring>

#include "core/check.h"
#include "panel.h"
#include "quant_blocks.h"

namespace ts::kernels {
namespace {

// ORs 4 bits into a 64-bit little-endian mask at bit 4r (rows of a panel own nibbles).
void or_nibble(uint8_t* mask, int r, uint32_t nib) {
  uint64_t m;
  std::memcpy(&m, mask, 8);
  m |= uint64_t(nib & 0xF) << (4 * r);
  std::memcpy(mask, &m, 8);
}

// Bit p of each of the 4 bytes of w, gathered into bits 0..3 (byte i -> bit i).
uint32_t gather4(uint32_t w, int p) { return ((((w >> p) & 0x01010101u) * 0x01020408u) >> 24) & 0xF; }

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void put_word(uint8_t* dst, int r, const uint8_t* src) { std::memcpy(dst + 4 * r, src, 4); }
void put_half(uint8_t* dst, int r, uint16_t h) { std::memcpy(dst + 2 * r, &h, 2); }

void pack_q8_0(const BlockQ8_0& b, int r, uint8_t* g) {
  for (int j = 0; j < 8; ++j)
    put_word(g + pq8_0::kQs + 64 * j, r, reinterpret_cast<const uint8_t*>(b.qs) + 4 * j);
  put_half(g + pq8_0::kD, r, b.d);
}

void pack_nib32(const uint8_t* qs, int r, uint8_t* g) {
  for (int h = 0; h < 4; ++h) put_word(g + 64 * h, r, qs + 4 * h);
}

void pack_hbit32(const uint8_t* qh, int r, uint8_t* g) {
  const uint32_t bits = load_u32(qh);
  for (int h = 0; h < 4; ++h)
    for (int half = 0; half < 2; ++half) or_nibble(g + 8 * (2 * h + half), r, bits >> (16 * half + 4 * h));
}

void pack_kx_scales(const uint8_t* scales12, uint16_t d, uint16_t dmin, int r, uint8_t* sc, uint8_t* mn,
                    uint8_t* dd, uint8_t* dm) {
  for (int j = 0; j < 8; ++j) {
    int s, m;
    scale_min_k4(j, scales12, &s, &m);
    sc[16 * j + r] = uint8_t(s);
    mn[32 * (j / 2) + 2 * r + (j & 1)] = uint8_t(m);
  }
  put_half(dd, r, d);
  put_half(dm, r, dmin);
}

void pack_q4_k(const BlockQ4_K& b, int r, uint8_t* g) {
  for (int c = 0; c < 4; ++c)
    for (int h = 0; h < 8; ++h) put_word(g + pq4_k::nib(c, h), r, b.qs + 32 * c + 4 * h);
  pack_kx_scales(b.scales, b.d, b.dmin, r, g + pq4_k::kSc, g + pq4_k::kMn, g + pq4_k::kD, g + pq4_k::kDmin);
}

void pack_q5_k(const BlockQ5_K& b, int r, uint8_t* g) {
  for (int c = 0; c < 4; ++c) {
    for (int h = 0; h < 8; ++h) {
      put_word(g + pq5_k::nib(c, h), r, b.qs + 32 * c + 4 * h);
      const uint32_t qh = load_u32(b.qh + 4 * h);
      for (int half = 0; half < 2; ++half)
        or_nibble(g + pq5_k::hbit(c, h, half), r, gather4(qh, 2 * c + half));
    }
  }
  pack_kx_scales(b.scales, b.d, b.dmin, r, g + pq5_k::kSc, g + pq5_k::kMn, g + pq5_k::kD, g + pq5_k::kDmin);
}

void pack_q6_k(const BlockQ6_K& b, int r, uint8_t* g) {
  for (int n = 0; n < 2; ++n) {
    for (int q = 0; q < 2; ++q) {
      for (int h = 0; h < 8; ++h) {
        const int idx = (2 * n + q) * 8 + h;
        put_word(g + pq6_k::nib(idx), r, b.ql + 64 * n + 32 * q + 4 * h);
        uint8_t* top = g + pq6_k::top(idx) + 4 * r;
        for (int half = 0; half < 2; ++half) {
          const int k = 2 * half + q;  // which 32-column quarter of the 128-column half
          for (int i = 0; i < 4; ++i)
            top[i] |= uint8_t(((b.qh[32 * n + 4 * h + i] >> (2 * k)) & 3) << pq6_k::top_shift(idx, half));
        }
      }
    }
  }
  for (int j = 0; j < 16; ++j) g[pq6_k::kSc + 16 * j + r] = uint8_t(b.scales[j]);
  put_half(g + pq6_k::kD, r, b.d);
}

}  // namespace

bool is_panel_type(DType t) { return panel_block_bytes(t) > 0; }

int64_t panel_block_bytes(DType t) {
  switch (t) {
    case DType::Q8_0:
      return pq8_0::kBytes;
    case DType::Q4_0:
      return pq4_0::kBytes;
    case DType::Q4_1:
      return pq4_1::kBytes;
    case DType::Q5_0:
      return pq5_0::kBytes;
    case DType::Q5_1:
      return pq5_1::kBytes;
    case DType::Q4_K:
      return pq4_k::kBytes;
    case DType::Q5_K:
      return pq5_k::kBytes;
    case DType::Q6_K:
      return pq6_k::kBytes;
    default:
      return 0;
  }
}

int64_t panel_bytes(DType t, int64_t n_cols) {
  const int64_t bs = (t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K) ? kQKK : kQK;
  return n_cols / bs * panel_block_bytes(t);
}

void pack_panel(DType t, const uint8_t* rows, int64_t row_bytes, int n_rows, int64_t n_cols, uint8_t* out) {
  TS_CHECK(n_rows >= 0 && n_rows <= kPanelRows);
  const int64_t gb = panel_block_bytes(t);
  TS_CHECK(gb > 0);
  std::memset(out, 0, size_t(panel_bytes(t, n_cols)));
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* row = rows + r * row_bytes;
    switch (t) {
      case DType::Q8_0: {
        const auto* b = reinterpret_cast<const BlockQ8_0*>(row);
        for (int64_t i = 0; i < n_cols / kQK; ++i) pack_q8_0(b[i], r, out + i * gb);
        break;
      }
      case DType::Q4_0: {
        const auto* b = reinterpret_cast<const BlockQ4_0*>(row);
        for (int64_t i = 0; i < n_cols / kQK; ++i) {
          pack_nib32(b[i].qs, r, out + i * gb + pq4_0::kNib);
          put_half(out + i * gb + pq4_0::kD, r, b[i].d);
        }
        break;
      }
      case DType::Q4_1: {
        const auto* b = reinterpret_cast<const BlockQ4_1*>(row);
        for (int64_t i = 0; i < n_cols / kQK; ++i) {
          pack_nib32(b[i].qs, r, out + i * gb + pq4_1::kNib);
          put_half(out + i * gb + pq4_1::kD, r, b[i].d);
          put_half(out + i * gb + pq4_1::kM, r, b[i].m);
        }
        break;
      }
      case DType::Q5_0: {
        const auto* b = reinterpret_cast<const BlockQ5_0*>(row);
        for (int64_t i = 0; i < n_cols / kQK; ++i) {
          pack_nib32(b[i].qs, r, out + i * gb + pq5_0::kNib);
          pack_hbit32(b[i].qh, r, out + i * gb + pq5_0::kHbit);
          put_half(out + i * gb + pq5_0::kD, r, b[i].d);
        }
        break;
      }
      case DType::Q5_1: {
        const auto* b = reinterpret_cast<const BlockQ5_1*>(row);
        for (int64_t i = 0; i < n_cols / kQK; ++i) {
          pack_nib32(b[i].qs, r, out + i * gb + pq5_1::kNib);
          pack_hbit32(b[i].qh, r, out + i * gb + pq5_1::kHbit);
          put_half(out + i * gb + pq5_1::kD, r, b[i].d);
          put_half(out + i * gb + pq5_1::kM, r, b[i].m);
        }
        break;
      }
      case DType::Q4_K: {
        const auto* b = reinterpret_cast<const BlockQ4_K*>(row);
        for (int64_t i = 0; i < n_cols / kQKK; ++i) pack_q4_k(b[i], r, out + i * gb);
        break;
      }
      case DType::Q5_K: {
        const auto* b = reinterpret_cast<const BlockQ5_K*>(row);
        for (int64_t i = 0; i < n_cols / kQKK; ++i) pack_q5_k(b[i], r, out + i * gb);
        break;
      }
      case DType::Q6_K: {
        const auto* b = reinterpret_cast<const BlockQ6_K*>(row);
        for (int64_t i = 0; i < n_cols / kQKK; ++i) pack_q6_k(b[i], r, out + i * gb);
        break;
      }
      default:
        TS_CHECK(false);
    }
  }
}

}  // namespace ts::kernels
