// Helpers shared by the kernel tests and benchmarks: random rows of every type.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "core/rng.h"
#include "act.h"
#include "gemm_amx.h"
#include "quant_blocks.h"
#include "kernels/traits.h"

namespace ts::kernels::testing {

inline constexpr DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0,
                                         DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                         DType::Q4_K, DType::Q5_K, DType::Q6_K};

inline std::vector<float> random_floats(Rng& rng, int64_t n, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = rng.normal() * scale;
  return v;
}

// Rows of type t quantized from normal floats (what a model file looks like).
inline std::vector<uint8_t> quantized_rows(Rng& rng, DType t, int64_t n_rows, int64_t n_cols) {
  const int64_t rb = row_bytes(t, n_cols);
  std::vector<uint8_t> out(static_cast<size_t>(rb * n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    std::vector<float> x = random_floats(rng, n_cols);
    ref::from_float(t, x.data(), out.data() + r * rb, n_cols);
  }
  return out;
}

// Where the fp16 scales of a block sit (byte offsets).
inline std::vector<int> half_fields(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q8_0:
      return {0};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// Rows of random bytes (every level and bit pattern occurs) with finite, moderate fp16
// scales. Float types get random finite values instead.
inline std::vector<uint8_t> random_rows(Rng& rng, DType t, int64_t n_rows, int64_t n_cols) {
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) return quantized_rows(rng, t, n_rows, n_cols);
  const TypeTraits& tr = traits(t);
  const int64_t rb = row_bytes(t, n_cols);
  std::vector<uint8_t> out(static_cast<size_t>(rb * n_rows));
  for (auto& b : out) b = uint8_t(rng.next_u64());
  for (int64_t blk = 0; blk < int64_t(out.size()) / tr.type_size; ++blk) {
    uint8_t* p = out.data() + blk * tr.type_size;
    for (int off : half_fields(t)) {
      const uint16_t h = f32_to_fp16((rng.uniform_f() + 0.05f) * 0.01f * (rng.next_u64() & 1 ? 1.0f : -1.0f));
      std::memcpy(p + off, &h, 2);
    }
    if (t == DType::Q4_K || t == DType::Q5_K) {  // d and dmin are positive in real files
      for (int off : {0, 2}) {
        uint16_t h;
        std::memcpy(&h, p + off, 2);
        h &= 0x7FFF;
        std::memcpy(p + off, &h, 2);
      }
    }
  }
  return out;
}

// The activation row x converted to the vec_dot_type of weight type t.
// Activations of n floats as vec_dot takes them for weight type t, quantized the way the
// engine quantizes them (act.h): Q8_0 and Q8_1 with llama.cpp's x86 rounding (127 / amax,
// round half to even), which differs from its reference quantizer (ref::from_float:
// 1 / d, round half away) on values near a rounding boundary.
inline std::vector<uint8_t> convert_act(DType t, const float* x, int64_t n) {
  const DType vdt = traits(t).vec_dot_type;
  std::vector<uint8_t> out(static_cast<size_t>(row_bytes(vdt, n)));
  if (vdt != DType::Q8_0 && vdt != DType::Q8_1) {
    ref::from_float(vdt, x, out.data(), n);
    return out;
  }
  const int64_t nb = n / kQK;
  std::vector<int8_t> qs(static_cast<size_t>(n));
  std::vector<float> d(static_cast<size_t>(nb)), s(static_cast<size_t>(nb));
  std::vector<int32_t> corr(static_cast<size_t>(nb));
  const ActRowFns& f = act_row_fns(Isa::kScalar);
  if (vdt == DType::Q8_0) {
    f.q8_0(x, n, 0, qs.data(), d.data(), corr.data());
    auto* b = reinterpret_cast<BlockQ8_0*>(out.data());
    for (int64_t i = 0; i < nb; ++i) {
      b[i].d = f32_to_fp16(d[size_t(i)]);
      std::memcpy(b[i].qs, qs.data() + i * kQK, kQK);
    }
  } else {
    f.q8_1(x, n, qs.data(), d.data(), s.data());
    auto* b = reinterpret_cast<BlockQ8_1*>(out.data());
    for (int64_t i = 0; i < nb; ++i) {
      b[i].d = f32_to_fp16(d[size_t(i)]);
      b[i].s = f32_to_fp16(s[size_t(i)]);
      std::memcpy(b[i].qs, qs.data() + i * kQK, kQK);
    }
  }
  return out;
}

inline std::vector<Isa> isas_here() {
  std::vector<Isa> v;
  for (int i = 0; i <= int(best_isa()); ++i) v.push_back(Isa(i));
  return v;
}

// A panel kernel under test and its name.
struct GemmPath {
  std::string name;
  PanelGemmFn fn;
};

// The panel kernels of every ISA path this CPU runs for t, plus the AMX kernels with their
// tile instructions executed in software (where AVX-512 VNNI runs), so the tile code is
// tested on CPUs without AMX.
inline std::vector<GemmPath> gemm_paths(DType t) {
  std::vector<GemmPath> v;
  for (Isa isa : isas_here()) v.push_back({isa_name(isa), traits_for(t, isa).gemm});
  if (best_isa() >= Isa::kAvx512) {
    if (PanelGemmFn f = amx::emulated_gemm(t)) v.push_back({"amx-emulated", f});
  }
  return v;
}

inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace ts::kernels::testing
