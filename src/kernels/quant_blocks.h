// Block layouts of the quantized tensor types, bit-compatible with GGUF files (ggml's
// block_q4_0 ... block_q8_K). Every struct is exactly its on-disk size; fp16 fields are
// stored as raw IEEE half bits (core/fp16.h converts them).
//
// Values a block encodes (q = the stored integer, d/m/dmin = fp16 scales):
//   Q4_0  x = d * (q - 8)            q in 0..15, element j in low nibble of qs[j],
//                                    element j+16 in the high nibble
//   Q4_1  x = d * q + m              same nibble order as Q4_0
//   Q5_0  x = d * (q - 16)           low 4 bits as Q4_0, bit 4 of element j in bit j of qh
//   Q5_1  x = d * q + m              same bit order as Q5_0
//   Q8_0  x = d * q                  q in -127..127 from the quantizers (-128 is legal)
//   Q8_1  x = d * q, s = d * sum(q)  the activation type paired with Q4_1/Q5_1
//   Q4_K  256 elements in 8 sub-blocks of 32, each with a 6-bit scale and 6-bit min:
//         x = d * sc[j] * q - dmin * m[j]; 64-element chunk c keeps sub-block 2c in the low
//         nibbles of qs[32c..32c+31] and sub-block 2c+1 in the high nibbles
//   Q5_K  as Q4_K plus a fifth bit: element 64c + l has it in bit 2c of qh[l], element
//         64c + 32 + l in bit 2c + 1
//   Q6_K  256 elements in 16 sub-blocks of 16 with int8 scales: x = d * sc[j] * (q - 32);
//         see dequantize_q6_k in ref.cc for the bit positions
//   Q8_K  x = d * q (float d), bsums[j] = sum of q over elements 16j..16j+15 — the
//         activation type paired with the K-quants
#pragma once

#include <cstdint>

namespace ts::kernels {

inline constexpr int kQK = 32;    // elements per block of the 32-element formats
inline constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;  // d * sum(qs), rounded to fp16
  int8_t qs[kQK];
};
static_assert(sizeof(BlockQ8_1) == 36);

struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];  // 8 scales and 8 mins, 6 bits each (see scale_min_k4)
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQKK / 2];  // low 4 bits
  uint8_t qh[kQKK / 4];  // high 2 bits
  int8_t scales[kQKK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block. Sub-blocks 0..3
// keep them in the low 6 bits of bytes j and j+4; 4..7 split them: low 4 bits in byte j+4
// (scale low nibble, min high nibble), top 2 bits in the top bits of bytes j-4 / j.
inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Inverse of scale_min_k4: packs 8 scales and 8 mins (each 0..63) into 12 bytes.
inline void pack_scale_min_k4(const uint8_t* sc, const uint8_t* m, uint8_t* q) {
  for (int j = 0; j < 12; ++j) q[j] = 0;
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t(sc[j] & 63);
    q[j + 4] = uint8_t(m[j] & 63);
  }
  for (int j = 4; j < 8; ++j) {
    q[j + 4] = uint8_t((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
    q[j - 4] |= uint8_t((sc[j] >> 4) << 6);
    q[j] |= uint8_t((m[j] >> 4) << 6);
  }
}

}  // namespace ts::kernels
