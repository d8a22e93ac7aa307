#include "act.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "kernels/traits.h"
#include "quant_blocks.h"
#include "quantize.h"

namespace ts::kernels {
namespace {

int64_t align64(int64_t n) { return (n + 63) & ~int64_t(63); }

struct Layout {
  int64_t qs = 0, d = 0, corr = 0, s = 0, xs = 0, xf = 0, tok_bytes = 0;
};

// Whether activations of vec_dot_type vdt also get the interleaved tile layout (Act::tiles):
// 32-element blocks, several tokens, and the AVX-512 tiles that read it.
bool wants_tiles(DType vdt, int n_tok) {
  return (vdt == DType::Q8_0 || vdt == DType::Q8_1) && n_tok > 1 && best_isa() >= Isa::kAvx512;
}

// Copies the converted token t (at `base`, layout l) into its slots of the tile records.
void scatter_tiles(DType vdt, int64_t n_cols, const uint8_t* base, const Layout& l, int t, uint8_t* tiles) {
  const int64_t nb = n_cols / kQK;
  const int slot = t % Act::kTileTokens;
  uint8_t* rec = tiles + int64_t(t / Act::kTileTokens) * nb * Act::kTileBlockBytes;
  const uint8_t* aux = base + (vdt == DType::Q8_1 ? l.s : l.corr);
  for (int64_t b = 0; b < nb; ++b, rec += Act::kTileBlockBytes) {
    std::memcpy(rec + 32 * slot, base + l.qs + 32 * b, 32);
    std::memcpy(rec + Act::kTileD + 4 * slot, base + l.d + 4 * b, 4);
    std::memcpy(rec + Act::kTileAux + 4 * slot, aux + 4 * b, 4);
  }
}

// Whether Q8_K activations get the interleaved K-quant tile layout (Act::ktiles).
bool wants_ktiles(DType vdt, int n_tok) { return vdt == DType::Q8_K && n_tok > 1 && best_isa() >= Isa::kAvx512; }

// Copies the converted Q8_K token t into its slots of the K-quant tile records.
void scatter_ktiles(int64_t n_cols, const uint8_t* base, const Layout& l, int t, uint8_t* tiles) {
  const int64_t nb = n_cols / kQKK;
  const int slot = t % Act::kKTileTokens;
  uint8_t* rec = tiles + int64_t(t / Act::kKTileTokens) * nb * Act::kKTileBlockBytes;
  for (int64_t b = 0; b < nb; ++b, rec += Act::kKTileBlockBytes) {
    std::memcpy(rec + 256 * slot, base + l.qs + 256 * b, 256);
    std::memcpy(rec + Act::kKTileD + 4 * slot, base + l.d + 4 * b, 4);
    std::memcpy(rec + Act::kKTileXs + 16 * slot, base + l.xs + 16 * b, 16);
    std::memcpy(rec + Act::kKTileCorr + 64 * slot, base + l.corr + 64 * b, 64);
  }
}

Layout layout_for(DType vdt, int64_t n_cols) {
  Layout l;
  int64_t off = 0;
  auto take = [&](int64_t bytes) {
    const int64_t at = off;
    off += align64(bytes);
    return at;
  };
  if (vdt == DType::F32 || vdt == DType::F16 || vdt == DType::BF16) {
    l.xf = take(n_cols * 4);
  } else {
    const int64_t bs = vdt == DType::Q8_K ? kQKK : kQK;
    const int64_t nb = n_cols / bs;
    l.qs = take(n_cols);
    l.d = take(nb * 4);
    l.corr = take((vdt == DType::Q8_K ? nb * 16 : nb) * 4);
    l.s = take(nb * 4);
    l.xs = take(nb * 8 * 2);
  }
  l.tok_bytes = off;
  return l;
}

// One 32-block of activations as llama.cpp's x86 build quantizes them: d = amax / 127,
// q = round-half-to-even(x * (127 / amax)) (std::nearbyint in the default rounding mode).
// The weight quantizer (quantize.cc) follows the portable reference instead: x * (1 / d),
// rounded half away from zero. Returns sum(q); *d_out gets the unrounded d.
int act_q8_block32(const float* x, int8_t* qs, float* d_out) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  *d_out = amax / 127.0f;
  const float id = amax != 0 ? 127.0f / amax : 0.0f;
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    const int q = int(std::nearbyint(x[j] * id));
    qs[j] = int8_t(q);
    sum += q;
  }
  return sum;
}

void scalar_q8_0(const float* x, int64_t n, int offset, int8_t* qs, float* d, int32_t* corr) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    float dfull;
    corr[i] = -offset * act_q8_block32(x + i * kQK, qs + i * kQK, &dfull);
    d[i] = fp16_to_f32(f32_to_fp16(dfull));
  }
}

void scalar_q8_1(const float* x, int64_t n, int8_t* qs, float* d, float* s) {
  for (int64_t i = 0; i < n / kQK; ++i) {
    float dfull;
    const int sum = act_q8_block32(x + i * kQK, qs + i * kQK, &dfull);
    d[i] = fp16_to_f32(f32_to_fp16(dfull));
    s[i] = fp16_to_f32(f32_to_fp16(float(sum) * dfull));  // s uses the unrounded d
  }
}

void scalar_q8_k(const float* x, int64_t n, int8_t* qs, float* d, int32_t* corr16, int16_t* xs) {
  BlockQ8_K b;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    quantize_q8_k(x + i * kQKK, &b, kQKK);
    std::memcpy(qs + i * kQKK, b.qs, kQKK);
    d[i] = b.d;
    for (int j = 0; j < 16; ++j) corr16[i * 16 + j] = -32 * b.bsums[j];
    for (int j = 0; j < 8; ++j) xs[i * 8 + j] = int16_t(b.bsums[2 * j] + b.bsums[2 * j + 1]);
  }
}

void scalar_round_f16(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(f32_to_fp16(x[i]));
}

void scalar_round_bf16(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

constexpr ActRowFns kScalarFns = {scalar_q8_0, scalar_q8_1, scalar_q8_k, scalar_round_f16, scalar_round_bf16};

void convert_row(const ActRowFns& f, DType wtype, DType vdt, const float* x, int64_t n, uint8_t* base,
                 const Layout& l) {
  auto* xf = reinterpret_cast<float*>(base + l.xf);
  auto* qs = reinterpret_cast<int8_t*>(base + l.qs);
  auto* d = reinterpret_cast<float*>(base + l.d);
  auto* corr = reinterpret_cast<int32_t*>(base + l.corr);
  switch (vdt) {
    case DType::F32:
      std::memcpy(xf, x, size_t(n) * 4);
      return;
    case DType::F16:
      f.round_f16(x, n, xf);
      return;
    case DType::BF16:
      f.round_bf16(x, n, xf);
      return;
    case DType::Q8_0:
      f.q8_0(x, n, act_offset(wtype), qs, d, corr);
      return;
    case DType::Q8_1:
      f.q8_1(x, n, qs, d, reinterpret_cast<float*>(base + l.s));
      return;
    case DType::Q8_K:
      f.q8_k(x, n, qs, d, corr, reinterpret_cast<int16_t*>(base + l.xs));
      return;
    default:
      TS_CHECK(false);
  }
}

}  // namespace

const ActRowFns& act_row_fns(Isa isa) {
  if (int(isa) > int(best_isa())) isa = best_isa();
  switch (isa) {
    case Isa::kAmx:
    case Isa::kAvx512: {
      static const ActRowFns* f = act_row_fns_avx512();
      return *f;
    }
    case Isa::kAvx2: {
      static const ActRowFns* f = act_row_fns_avx2();
      return *f;
    }
    default:
      return kScalarFns;
  }
}

int act_offset(DType wtype) {
  switch (wtype) {
    case DType::Q4_0:
      return 8;
    case DType::Q5_0:
      return 16;
    case DType::Q8_0:
      return 128;
    default:
      return 0;
  }
}

const Act& ActBuffer::prepare(DType wtype, const float* x, int64_t x_stride, int64_t n_cols, int n_tok,
                              ThreadPool* pool) {
  const DType vdt = traits(wtype).vec_dot_type;
  Act& a = act_;
  a = Act{};
  a.wtype = wtype;
  a.n_cols = n_cols;
  a.n_tok = n_tok;
  if (vdt == DType::F32) {  // used in place
    a.tok_bytes = x_stride * 4;
    a.xf = x;
    return a;
  }
  const Layout l = layout_for(vdt, n_cols);
  const bool tiles = wants_tiles(vdt, n_tok);
  const int64_t n_groups = (n_tok + Act::kTileTokens - 1) / Act::kTileTokens;
  const size_t tile_bytes = tiles ? size_t(n_groups * (n_cols / kQK) * Act::kTileBlockBytes) : 0;
  const bool ktiles = wants_ktiles(vdt, n_tok);
  const int64_t n_kgroups = (n_tok + Act::kKTileTokens - 1) / Act::kKTileTokens;
  const size_t ktile_bytes = ktiles ? size_t(n_kgroups * (n_cols / kQKK) * Act::kKTileBlockBytes) : 0;
  const size_t need = size_t(l.tok_bytes) * size_t(n_tok) + tile_bytes + ktile_bytes + 64;
  if (buf_.size() < need) buf_.resize(need);
  uint8_t* base = buf_.data() + ((64 - (reinterpret_cast<uintptr_t>(buf_.data()) & 63)) & 63);
  uint8_t* tile_base = base + l.tok_bytes * n_tok;
  // The unused slots of a last partial group.
  if (tiles && n_tok % Act::kTileTokens != 0) {
    const int64_t nb = n_cols / kQK;
    std::memset(tile_base + (n_groups - 1) * nb * Act::kTileBlockBytes, 0, size_t(nb * Act::kTileBlockBytes));
  }
  uint8_t* ktile_base = tile_base + tile_bytes;
  if (ktiles && n_tok % Act::kKTileTokens != 0) {
    const int64_t nb = n_cols / kQKK;
    std::memset(ktile_base + (n_kgroups - 1) * nb * Act::kKTileBlockBytes, 0, size_t(nb * Act::kKTileBlockBytes));
  }
  const ActRowFns& f = act_row_fns(best_isa());
  auto convert = [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      convert_row(f, wtype, vdt, x + t * x_stride, n_cols, base + t * l.tok_bytes, l);
      if (tiles) scatter_tiles(vdt, n_cols, base + t * l.tok_bytes, l, int(t), tile_base);
      if (ktiles) scatter_ktiles(n_cols, base + t * l.tok_bytes, l, int(t), ktile_base);
    }
  };
  if (pool && n_tok > 1) {
    pool->parallel_for(n_tok, 1, convert);
  } else {
    convert(0, n_tok, 0);
  }
  a.tok_bytes = l.tok_bytes;
  if (vdt == DType::F16 || vdt == DType::BF16) {
    a.xf = reinterpret_cast<const float*>(base + l.xf);
  } else {
    a.qs = reinterpret_cast<const int8_t*>(base + l.qs);
    a.d = reinterpret_cast<const float*>(base + l.d);
    a.corr = reinterpret_cast<const int32_t*>(base + l.corr);
    a.s = reinterpret_cast<const float*>(base + l.s);
    a.xs = reinterpret_cast<const int16_t*>(base + l.xs);
    if (tiles) a.tiles = tile_base;
    if (ktiles) a.ktiles = ktile_base;
  }
  return a;
}

}  // namespace ts::kernels
