// The one per-type table: for every supported type and ISA the kernels that run, with
// missing ISA kernels mapped to the next lower ISA (AMX -> AVX-512 -> AVX2 -> scalar).
#include "kernels/traits.h"

#include <array>

#include "core/check.h"
#include "core/cpu_features.h"
#include "kernels_impl.h"
#include "quantize.h"

namespace ts::kernels {
namespace {

constexpr DType kSupported[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                                DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1, DType::Q4_K,
                                DType::Q5_K, DType::Q6_K, DType::Q8_K};
constexpr int kNumIds = 31;  // DType ids 0..30
constexpr int kNumIsa = 4;

struct Shape {
  int64_t block_size, type_size;
  DType vec_dot_type;
};

Shape shape_of(DType t) {
  switch (t) {
    case DType::F32:
      return {1, 4, DType::F32};
    case DType::F16:
      return {1, 2, DType::F16};
    case DType::BF16:
      return {1, 2, DType::BF16};
    case DType::Q4_0:
      return {32, 18, DType::Q8_0};
    case DType::Q4_1:
      return {32, 20, DType::Q8_1};
    case DType::Q5_0:
      return {32, 22, DType::Q8_0};
    case DType::Q5_1:
      return {32, 24, DType::Q8_1};
    case DType::Q8_0:
      return {32, 34, DType::Q8_0};
    case DType::Q8_1:
      return {32, 36, DType::Q8_1};
    case DType::Q4_K:
      return {256, 144, DType::Q8_K};
    case DType::Q5_K:
      return {256, 176, DType::Q8_K};
    case DType::Q6_K:
      return {256, 210, DType::Q8_K};
    case DType::Q8_K:
      return {256, 292, DType::Q8_K};
    default:
      return {0, 0, t};
  }
}

IsaKernels kernels_of(DType t, Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return scalar_kernels(t);
    case Isa::kAvx2:
      return avx2_kernels(t);
    case Isa::kAvx512:
      return avx512_kernels(t);
    case Isa::kAmx:
      return amx_kernels(t);
  }
  return {};
}

struct Table {
  std::array<std::array<TypeTraits, kNumIsa>, kNumIds> rows{};
  std::array<bool, kNumIds> supported{};

  Table() {
    for (DType t : kSupported) {
      const int id = int(t);
      supported[size_t(id)] = true;
      const Shape s = shape_of(t);
      IsaKernels have;  // accumulated: each ISA overrides what it provides
      for (int i = 0; i < kNumIsa; ++i) {
        // An ISA file is compiled with its own flags, so even its table function may use
        // its instructions: call only those this CPU runs (the rows above stay copies).
        const IsaKernels k = i <= int(best_isa()) ? kernels_of(t, Isa(i)) : IsaKernels{};
        if (k.to_float) have.to_float = k.to_float;
        if (k.vec_dot) have.vec_dot = k.vec_dot;
        if (k.gemm) have.gemm = k.gemm;
        TypeTraits& tr = rows[size_t(id)][size_t(i)];
        tr.type = t;
        tr.block_size = s.block_size;
        tr.type_size = s.type_size;
        tr.vec_dot_type = s.vec_dot_type;
        tr.to_float = have.to_float;
        tr.from_float = quantizer(t);
        tr.vec_dot = have.vec_dot;
        tr.gemm = have.gemm;
        tr.isa = Isa(i);
      }
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAmx:
      return "amx";
  }
  return "unknown";
}

Isa best_isa() {
  const CpuFeatures& f = cpu_features();
  // The AVX-512 kernels use VNNI (vpdpbusd) for every int8 product; the AMX ones add tile
  // multiplies to them.
  if (f.avx512 && f.avx512_vnni) return f.amx_int8 ? Isa::kAmx : Isa::kAvx512;
  if (f.avx2) return Isa::kAvx2;
  return Isa::kScalar;
}

bool is_supported(DType t) {
  const int id = int(t);
  return id >= 0 && id < kNumIds && table().supported[size_t(id)];
}

const TypeTraits& traits_for(DType t, Isa isa) {
  TS_CHECK_MSG(is_supported(t), dtype_name(t));
  if (int(isa) > int(best_isa())) isa = best_isa();  // never hand out kernels the CPU lacks
  return table().rows[size_t(t)][size_t(isa)];
}

const TypeTraits& traits(DType t) {
  static const Isa best = best_isa();
  return traits_for(t, best);
}

int64_t row_bytes(DType t, int64_t n) {
  const TypeTraits& tr = traits_for(t, Isa::kScalar);
  TS_CHECK(n % tr.block_size == 0);
  return n / tr.block_size * tr.type_size;
}

}  // namespace ts::kernels
