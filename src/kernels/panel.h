// The packed "panel" layout of quantized weights (private).
//
// The matrix kernels give each of 16 weight rows its own 32-bit SIMD lane, so a panel of 16
// rows is interleaved block by block: for every 4 consecutive levels (bytes) a row
// contributes one 32-bit word, and the 16 rows' words for the same columns form one 64-byte
// vector. One VNNI instruction (vpdpbusd) then multiplies that vector with 4 activation
// bytes broadcast to all lanes and accumulates 16 rows at once, with no horizontal sums.
// Scales become per-row vectors next to the levels. The layout is lossless (levels and
// fp16 scales are copied bit for bit), so packing at load time or on the fly gives the same
// results; only the speed differs.
//
// Per panel the data is a sequence of "groups", one per block of the type (32 or 256
// columns), each of panel_block_bytes(t) bytes. Inside a group (r = row 0..15):
//   Q8_0  qs[g=0..7][r][4] (int8, columns 4g..4g+3)         d[r] fp16
//   Q4_0  nib[h=0..3][r][4] = the row's qs[4h..4h+3]: low nibbles are columns 4h..4h+3,
//         high nibbles 16+4h..16+4h+3                      d[r]
//   Q4_1  as Q4_0, then d[r], m[r]
//   Q5_0  nib as Q4_0, hbit[h][half][8]: a 64-bit mask, bit 4r+i = fifth bit of column
//         16*half + 4h + i                                 d[r]
//   Q5_1  as Q5_0, then m[r]
//   Q4_K  header first (the kernels then read each group front to back, which keeps the
//         hardware prefetcher streaming): sc[j=0..7][r] (u8 scales), mn[p=0..3][r][2] (u8
//         mins of sub-blocks 2p, 2p+1), d[r], dmin[r]; then nib[c=0..3][h=0..7][r][4] = the
//         row's qs[32c+4h..+3]: low nibbles are columns 64c+4h.., sub-block 2c; high
//         nibbles 64c+32+4h.., sub-block 2c+1
//   Q5_K  the Q4_K header; then per chunk c: nib[h=0..7][r][4] as Q4_K, followed by
//         hbit[h][half][8] (fifth bits of the low/high nibble columns)
//   Q6_K  sc[j=0..15][r] (int8), d[r], padding to 64 bytes; then per chunk (n, q) in
//         0..1 x 0..1: nib[h=0..7][r][4] = the row's ql[64n+32q+4h..+3] (low nibbles are
//         columns 128n+32q+4h.., high nibbles 128n+64+32q+4h..), followed by top[p=0..3]
//         [r][4]: the top two bits of the levels of nib[2p] and nib[2p+1], byte for byte,
//         at bits 2 * (2 * (h & 1) + half) (half 0: low nibble column, 1: high) — so
//         shifting a whole 64-byte vector and masking 0x30 yields them in place
// Loads of levels are 64-byte aligned in every K-quant group (a panel is 64-aligned).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ts::kernels {

inline constexpr int kPanelRows = 16;

// The kernels' 64-byte aligned scratch buffers, one per thread and use, grown to at least
// `bytes` (matmul.cc): a panel packed on the fly, and the levels a tile call unpacks once
// for its tiles (used at the same time, so two buffers).
enum class Scratch { kPackedPanel, kUnpackedLevels };
uint8_t* thread_scratch(Scratch use, int64_t bytes);

namespace pq8_0 {
inline constexpr int kQs = 0, kD = 512, kBytes = 544;
}
namespace pq4_0 {
inline constexpr int kNib = 0, kD = 256, kBytes = 288;
}
namespace pq4_1 {
inline constexpr int kNib = 0, kD = 256, kM = 288, kBytes = 320;
}
namespace pq5_0 {
inline constexpr int kNib = 0, kHbit = 256, kD = 320, kBytes = 352;
}
namespace pq5_1 {
inline constexpr int kNib = 0, kHbit = 256, kD = 320, kM = 352, kBytes = 384;
}
// The 32-element types' group bytes, scale and min offsets, as constants for kernels
// templated on the type.
template <DType W>
constexpr int group_bytes32() {
  return W == DType::Q8_0   ? pq8_0::kBytes
         : W == DType::Q4_0 ? pq4_0::kBytes
         : W == DType::Q4_1 ? pq4_1::kBytes
         : W == DType::Q5_0 ? pq5_0::kBytes
                            : pq5_1::kBytes;
}
template <DType W>
constexpr int d_offset32() {
  return W == DType::Q8_0   ? pq8_0::kD
         : W == DType::Q4_0 ? pq4_0::kD
         : W == DType::Q4_1 ? pq4_1::kD
         : W == DType::Q5_0 ? pq5_0::kD
                            : pq5_1::kD;
}
template <DType W>
constexpr bool has_min32() {
  return W == DType::Q4_1 || W == DType::Q5_1;
}
template <DType W>
constexpr int m_offset32() {  // Q4_1 / Q5_1
  return W == DType::Q4_1 ? pq4_1::kM : pq5_1::kM;
}

namespace pq4_k {
inline constexpr int kSc = 0, kMn = 128, kD = 256, kDmin = 288, kData = 320, kBytes = 2368;
constexpr int nib(int c, int h) { return kData + 64 * (8 * c + h); }
}  // namespace pq4_k
namespace pq5_k {
inline constexpr int kSc = 0, kMn = 128, kD = 256, kDmin = 288, kData = 320, kChunk = 640, kBytes = 2880;
constexpr int nib(int c, int h) { return kData + kChunk * c + 64 * h; }
constexpr int hbit(int c, int h, int half) { return kData + kChunk * c + 512 + 16 * h + 8 * half; }
}  // namespace pq5_k
namespace pq6_k {
inline constexpr int kSc = 0, kD = 256, kData = 320, kChunk = 768, kBytes = 3392;
// idx = 8 * (2n + q) + h
constexpr int nib(int idx) { return kData + kChunk * (idx / 8) + 64 * (idx % 8); }
constexpr int top(int idx) { return kData + kChunk * (idx / 8) + 512 + 64 * ((idx % 8) / 2); }
constexpr int top_shift(int idx, int half) { return 2 * (2 * (idx & 1) + half); }
}  // namespace pq6_k

// Whether t is stored in panels (the quantized weight types); float types are used in place.
bool is_panel_type(DType t);
// Bytes of one group (16 rows x one block); 0 for float types.
int64_t panel_block_bytes(DType t);
// Bytes of one packed panel of n_cols columns.
int64_t panel_bytes(DType t, int64_t n_cols);

// Packs n_rows (<= 16; the rest of the panel is zero) consecutive rows of row_bytes bytes.
void pack_panel(DType t, const uint8_t* rows, int64_t row_bytes, int n_rows, int64_t n_cols, uint8_t* out);

}  // namespace ts::kernels
