// Quantizers: activation types byte-exact against hand-checked llama.cpp rounding; weight
// types within error bounds; panels decode to the same values as the rows they came from.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "core/fp16.h"
#include "quant_blocks.h"
#include "quantize.h"
#include "testing/random_rows.h"

namespace ts::kernels {
namespace {

// 127 and -127 make d = 1 exactly, so the levels are the rounded inputs themselves.
std::vector<float> ties_block() {
  std::vector<float> x(32, 0.0f);
  const float v[] = {127, -127, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 3.49f, 126.5f, -0.49f, 7, -64.5f};
  for (size_t i = 0; i < std::size(v); ++i) x[i] = v[i];
  return x;
}

TEST(Quantize, Q8_0RoundsHalfAwayFromZero) {
  const auto x = ties_block();
  BlockQ8_0 b;
  quantize_q8_0(x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x3C00);  // 1.0
  const int8_t want[] = {127, -127, 1, -1, 2, 3, -3, 3, 127, 0, 7, -65};
  for (size_t i = 0; i < std::size(want); ++i) EXPECT_EQ(b.qs[i], want[i]) << i;
  for (int i = int(std::size(want)); i < 32; ++i) EXPECT_EQ(b.qs[i], 0);
}

TEST(Quantize, Q8_1StoresRoundedSum) {
  const auto x = ties_block();
  BlockQ8_1 b;
  quantize_q8_1(x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x3C00);
  const int sum = 127 - 127 + 1 - 1 + 2 + 3 - 3 + 3 + 127 + 0 + 7 - 65;
  EXPECT_EQ(b.s, f32_to_fp16(float(sum)));
  EXPECT_EQ(b.qs[8], 127);
}

TEST(Quantize, Q8_KRoundsHalfToEvenAgainstLargestMagnitude) {
  std::vector<float> x(256, 0.0f);
  const auto t = ties_block();  // largest magnitude 127 comes first (positive): iscale = -1
  std::copy(t.begin(), t.end(), x.begin());
  x[40] = 4.5f;
  BlockQ8_K b;
  quantize_q8_k(x.data(), &b, 256);
  EXPECT_EQ(b.d, -1.0f);
  // q = nearest_int(-x): ties to even.
  const int8_t want[] = {-127, 127, 0, 0, -2, -2, 2, -3, -126, 0, -7, 64};
  for (size_t i = 0; i < std::size(want); ++i) EXPECT_EQ(b.qs[i], want[i]) << i;
  EXPECT_EQ(b.qs[40], -4);
  int s0 = 0;
  for (int i = 0; i < 16; ++i) s0 += b.qs[i];
  EXPECT_EQ(b.bsums[0], s0);
  EXPECT_EQ(b.bsums[2], -4);
  EXPECT_EQ(b.bsums[1], 0);

  std::vector<float> zero(256, 0.0f);
  quantize_q8_k(zero.data(), &b, 256);
  EXPECT_EQ(b.d, 0.0f);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(b.qs[i], 0);
}

TEST(Quantize, NearestIntIsRoundHalfEven) {
  EXPECT_EQ(nearest_int(0.5f), 0);
  EXPECT_EQ(nearest_int(1.5f), 2);
  EXPECT_EQ(nearest_int(-1.5f), -2);
  EXPECT_EQ(nearest_int(-0.5f), 0);
  EXPECT_EQ(nearest_int(2.4999f), 2);
  EXPECT_EQ(nearest_int(-126.6f), -127);
}

// Relative RMS error of quantize -> dequantize on normal data.
double rel_rmse(DType t, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(size_t(row_bytes(t, n)));
  std::vector<float> y(x.size());
  ref::from_float(t, x.data(), q.data(), n);
  ref::to_float(t, q.data(), y.data(), n);
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += double(x[i] - y[i]) * (x[i] - y[i]);
    s += double(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

TEST(Quantize, WeightQuantizersMeetErrorBounds) {
  Rng rng(3);
  const auto x = testing::random_floats(rng, 256 * 64);
  struct Bound {
    DType t;
    double max_rel_rmse;
  };
  // Bits per weight: 4.5 (Q4_0, Q4_K), 5 (Q4_1), 5.5 (Q5_0, Q5_K), 6 (Q5_1), 6.56 (Q6_K), 8.5.
  const Bound bounds[] = {{DType::Q4_0, 0.095}, {DType::Q4_1, 0.085}, {DType::Q5_0, 0.047},
                          {DType::Q5_1, 0.042}, {DType::Q8_0, 0.006}, {DType::Q4_K, 0.08},
                          {DType::Q5_K, 0.04},  {DType::Q6_K, 0.02},  {DType::F16, 5e-4},
                          {DType::BF16, 4e-3},  {DType::F32, 0.0}};
  for (const Bound& b : bounds) {
    const double e = rel_rmse(b.t, x);
    std::printf("%-5s rel rmse %.5f\n", dtype_name(b.t), e);
    EXPECT_LE(e, b.max_rel_rmse) << dtype_name(b.t);
  }
  // The K-quants' scale search must beat the plain formats of the same size.
  EXPECT_LT(rel_rmse(DType::Q4_K, x), rel_rmse(DType::Q4_0, x));
  EXPECT_LT(rel_rmse(DType::Q5_K, x), rel_rmse(DType::Q5_0, x));
}

TEST(Quantize, HandlesConstantAndZeroBlocks) {
  for (DType t : testing::kWeightTypes) {
    const int64_t n = 256;
    for (float v : {0.0f, 1.0f, -3.0f}) {
      std::vector<float> x(static_cast<size_t>(n), v), y(static_cast<size_t>(n));
      std::vector<uint8_t> q(size_t(row_bytes(t, n)));
      ref::from_float(t, x.data(), q.data(), n);
      ref::to_float(t, q.data(), y.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(y[size_t(i)], v, 0.02f * std::fabs(v) + 1e-6f) << dtype_name(t) << " v=" << v;
    }
  }
}

TEST(Quantize, ScaleMinPackingRoundTrips) {
  uint8_t sc[8], m[8], q[12];
  for (int k = 0; k < 64; ++k) {
    for (int j = 0; j < 8; ++j) {
      sc[j] = uint8_t((k * 7 + j * 13) & 63);
      m[j] = uint8_t((k * 11 + j * 5 + 1) & 63);
    }
    pack_scale_min_k4(sc, m, q);
    for (int j = 0; j < 8; ++j) {
      int s, mm;
      scale_min_k4(j, q, &s, &mm);
      ASSERT_EQ(s, sc[j]);
      ASSERT_EQ(mm, m[j]);
    }
  }
}

}  // namespace
}  // namespace ts::kernels
