// Every type x every ISA path this CPU runs, against the plain reference (ref.cc).
#include <cmath>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "core/cpu_features.h"
#include "kernels/traits.h"
#include "testing/random_rows.h"

namespace ts::kernels {
namespace {

using testing::bits;
using testing::convert_act;
using testing::isas_here;
using testing::kWeightTypes;
using testing::random_floats;
using testing::random_rows;

// Column counts: 1, 3, 7 and 13 blocks, plus a few lengths that are not multiples of the
// SIMD width for the float types.
std::vector<int64_t> sizes_for(DType t) {
  const int64_t bs = traits(t).block_size;
  std::vector<int64_t> v = {bs, 3 * bs, 7 * bs, 13 * bs};
  if (bs == 1) v.insert(v.end(), {2, 15, 16, 17, 31, 33, 100, 1000});
  return v;
}

std::string label(DType t, Isa isa, int64_t n) {
  return std::string(dtype_name(t)) + "/" + isa_name(isa) + "/n=" + std::to_string(n);
}

TEST(Traits, TableMatchesGgufLayouts) {
  for (DType t : kWeightTypes) {
    ASSERT_TRUE(is_supported(t));
    const auto layout = dtype_layout(uint32_t(t));
    ASSERT_TRUE(layout.has_value());
    const TypeTraits& tr = traits(t);
    EXPECT_EQ(tr.block_size, int64_t(layout->block_size)) << dtype_name(t);
    EXPECT_EQ(tr.type_size, int64_t(layout->type_size)) << dtype_name(t);
    EXPECT_NE(tr.to_float, nullptr);
    EXPECT_NE(tr.from_float, nullptr);
    EXPECT_NE(tr.vec_dot, nullptr);
    EXPECT_NE(tr.gemm, nullptr);
  }
  EXPECT_EQ(traits(DType::F32).vec_dot_type, DType::F32);
  EXPECT_EQ(traits(DType::F16).vec_dot_type, DType::F16);
  EXPECT_EQ(traits(DType::BF16).vec_dot_type, DType::BF16);
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0}) EXPECT_EQ(traits(t).vec_dot_type, DType::Q8_0);
  for (DType t : {DType::Q4_1, DType::Q5_1}) EXPECT_EQ(traits(t).vec_dot_type, DType::Q8_1);
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) EXPECT_EQ(traits(t).vec_dot_type, DType::Q8_K);
  EXPECT_TRUE(is_supported(DType::Q8_1));
  EXPECT_TRUE(is_supported(DType::Q8_K));
  EXPECT_FALSE(is_supported(DType::Q2_K));
  EXPECT_FALSE(is_supported(DType::I32));
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 288);
  EXPECT_EQ(row_bytes(DType::F16, 3), 6);
}

TEST(Traits, BestIsaFollowsCpuFeatures) {
  const CpuFeatures& f = cpu_features();
  const Isa best = best_isa();
  if (f.avx512 && f.avx512_vnni && f.amx_int8)
    EXPECT_EQ(best, Isa::kAmx);
  else if (f.avx512 && f.avx512_vnni)
    EXPECT_EQ(best, Isa::kAvx512);
  else if (f.avx2)
    EXPECT_EQ(best, Isa::kAvx2);
  else
    EXPECT_EQ(best, Isa::kScalar);
  // A path above what the CPU runs falls back to the best one it does.
  EXPECT_EQ(traits_for(DType::Q8_0, Isa::kAmx).isa, best);
  EXPECT_EQ(traits_for(DType::Q8_0, Isa::kAvx512).isa, best == Isa::kAmx ? Isa::kAvx512 : best);
  std::printf("cpu: %s, best kernels: %s\n", f.to_string().c_str(), isa_name(best));
}

// Dequantization on every path equals the reference (same single multiply-add per value;
// allow 1 ulp-ish slack for the K-quants' two-term formula).
TEST(Kernels, ToFloatMatchesReference) {
  Rng rng(1);
  for (DType t : kWeightTypes) {
    for (int64_t n : sizes_for(t)) {
      const auto w = random_rows(rng, t, 1, n);
      std::vector<float> want(size_t(n), 0.0f);
      ref::to_float(t, w.data(), want.data(), n);
      for (Isa isa : isas_here()) {
        std::vector<float> got(size_t(n), -1.0f);
        traits_for(t, isa).to_float(w.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const float tol = 1e-6f * std::fabs(want[size_t(i)]) + 1e-12f;
          ASSERT_NEAR(got[size_t(i)], want[size_t(i)], tol) << label(t, isa, n) << " i=" << i;
        }
      }
    }
  }
}

// vec_dot on every path: within 1e-5 of sum |w x| of the double-precision reference, and
// bit-identical across paths (they share the canonical arithmetic).
TEST(Kernels, VecDotMatchesReference) {
  Rng rng(2);
  for (DType t : kWeightTypes) {
    for (int64_t n : sizes_for(t)) {
      for (int trial = 0; trial < 2; ++trial) {
        const auto w = trial == 0 ? testing::quantized_rows(rng, t, 1, n) : random_rows(rng, t, 1, n);
        const auto xf = random_floats(rng, n);
        const auto x = convert_act(t, xf.data(), n);
        const double want = ref::vec_dot(t, n, w.data(), x.data());
        // sum |w x| from dequantized values bounds the rounding error.
        std::vector<float> wd(static_cast<size_t>(n)), xd(static_cast<size_t>(n));
        ref::to_float(t, w.data(), wd.data(), n);
        ref::to_float(traits(t).vec_dot_type, x.data(), xd.data(), n);
        double mag = 0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(wd[size_t(i)]) * xd[size_t(i)]);
        // Q4_1/Q5_1 use Q8_1's s = fp16(d * sum(q)) for the min term, as llama.cpp does:
        // allow its rounding (half an fp16 ulp of m * s per block).
        double s_slack = 0;
        if (traits(t).vec_dot_type == DType::Q8_1) {
          for (int64_t b = 0; b < n / 32; ++b) {
            uint16_t m, sx;
            std::memcpy(&m, w.data() + b * traits(t).type_size + 2, 2);
            std::memcpy(&sx, x.data() + b * 36 + 2, 2);
            s_slack += std::fabs(double(fp16_to_f32(m)) * fp16_to_f32(sx)) * 0x1p-11;
          }
        }
        const float first = traits_for(t, Isa::kScalar).vec_dot(n, w.data(), x.data());
        for (Isa isa : isas_here()) {
          const float got = traits_for(t, isa).vec_dot(n, w.data(), x.data());
          EXPECT_NEAR(got, want, 1e-5 * mag + s_slack + 1e-30) << label(t, isa, n);
          EXPECT_EQ(bits(got), bits(first))
              << label(t, isa, n) << " differs from scalar: " << got << " vs " << first;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ts::kernels
