// Activation converters: every ISA path produces the scalar bytes, which follow llama.cpp's
// x86 activation quantizer (ties to even), not the weight quantizer (ties away from zero).
#include "act.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "core/fp16.h"
#include "quant_blocks.h"
#include "quantize.h"
#include "testing/random_rows.h"

namespace ts::kernels {
namespace {

// Rows that exercise the rounding: normal data at several scales, exact ties (amax = 127
// makes 1/d = 1), zero blocks, a block whose largest magnitude is negative, tiny values.
std::vector<std::vector<float>> test_rows(int64_t n) {
  Rng rng(5);
  std::vector<std::vector<float>> rows;
  for (float scale : {1.0f, 1e-3f, 300.0f}) rows.push_back(testing::random_floats(rng, n, scale));
  std::vector<float> ties(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    ties[size_t(i)] = float(int(i % 255) - 127) + (i % 3 == 0 ? 0.5f : i % 3 == 1 ? -0.5f : 0.25f);
  for (int64_t i = 0; i < n; i += 32) ties[size_t(i)] = 127.0f;
  rows.push_back(ties);
  std::vector<float> mixed = testing::random_floats(rng, n);
  for (int64_t i = 0; i < std::min<int64_t>(n, 256); ++i) mixed[size_t(i)] = 0.0f;  // a zero block
  if (n > 300) mixed[300] = -50.0f;
  mixed[size_t(n - 1)] = 1e-30f;
  rows.push_back(mixed);
  return rows;
}

void check_every_path(int64_t n) {
  const ActRowFns& ref = act_row_fns(Isa::kScalar);
  for (Isa isa : testing::isas_here()) {
    const ActRowFns& f = act_row_fns(isa);
    for (const auto& x : test_rows(n)) {
      for (int offset : {0, 8, 16, 128}) {
        std::vector<int8_t> q0(n), q1(n);
        std::vector<float> d0(n / 32), d1(n / 32);
        std::vector<int32_t> c0(n / 32), c1(n / 32);
        ref.q8_0(x.data(), n, offset, q0.data(), d0.data(), c0.data());
        f.q8_0(x.data(), n, offset, q1.data(), d1.data(), c1.data());
        ASSERT_EQ(q0, q1) << isa_name(isa);
        ASSERT_EQ(0, std::memcmp(d0.data(), d1.data(), d0.size() * 4)) << isa_name(isa);
        ASSERT_EQ(c0, c1) << isa_name(isa);
      }
      {
        std::vector<int8_t> q0(n), q1(n);
        std::vector<float> d0(n / 32), d1(n / 32), s0(n / 32), s1(n / 32);
        ref.q8_1(x.data(), n, q0.data(), d0.data(), s0.data());
        f.q8_1(x.data(), n, q1.data(), d1.data(), s1.data());
        ASSERT_EQ(q0, q1) << isa_name(isa);
        ASSERT_EQ(0, std::memcmp(d0.data(), d1.data(), d0.size() * 4));
        ASSERT_EQ(0, std::memcmp(s0.data(), s1.data(), s0.size() * 4));
      }
      {
        std::vector<int8_t> q0(n), q1(n);
        std::vector<float> d0(n / 256), d1(n / 256);
        std::vector<int32_t> c0(n / 16), c1(n / 16);
        std::vector<int16_t> x0(n / 32), x1(n / 32);
        ref.q8_k(x.data(), n, q0.data(), d0.data(), c0.data(), x0.data());
        f.q8_k(x.data(), n, q1.data(), d1.data(), c1.data(), x1.data());
        ASSERT_EQ(q0, q1) << isa_name(isa);
        ASSERT_EQ(0, std::memcmp(d0.data(), d1.data(), d0.size() * 4));
        ASSERT_EQ(c0, c1);
        ASSERT_EQ(x0, x1);
      }
    }
  }
}

TEST(Act, EveryPathMatchesScalarBytes) {
  // 768: one group of 16 blocks (the AVX-512 converters' unit) and 8 single blocks.
  // 4864: 9 groups and 8 blocks (Qwen2 0.5B's FFN width).
  for (int64_t n : {256 * 3, 256 * 19}) check_every_path(n);
}

TEST(Act, Q8ActivationsRoundTiesToEvenLikeLlamaCppOnX86) {
  // amax = 127 makes the multiplier exactly 1, so x = k + 0.5 is an exact tie.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  x[4] = -0.5f;
  x[5] = 0.5f;
  x[6] = 1.49f;
  for (Isa isa : testing::isas_here()) {
    const ActRowFns& f = act_row_fns(isa);
    std::vector<int8_t> q(32);
    std::vector<float> d(1), s(1);
    std::vector<int32_t> c(1);
    f.q8_0(x.data(), 32, 0, q.data(), d.data(), c.data());
    EXPECT_EQ(std::vector<int>(q.begin(), q.begin() + 7), (std::vector<int>{127, 2, 4, -2, 0, 0, 1})) << isa_name(isa);
    EXPECT_EQ(d[0], fp16_to_f32(f32_to_fp16(1.0f)));
    f.q8_1(x.data(), 32, q.data(), d.data(), s.data());
    EXPECT_EQ(std::vector<int>(q.begin(), q.begin() + 7), (std::vector<int>{127, 2, 4, -2, 0, 0, 1})) << isa_name(isa);
    EXPECT_EQ(s[0], 132.0f);  // 127 + 2 + 4 - 2 + 1
  }
}

TEST(Act, FloatRoundingMatchesScalarIncludingSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1e-40f,
                          -1e-40f,
                          1e-6f,
                          6e-8f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          1e10f,
                          -1e10f,
                          inf,
                          -inf,
                          1.0f + 0x1p-11f,
                          1.0f + 0x1p-10f + 0x1p-11f,
                          1.0f + 0x1p-8f,
                          1.0f + 0x1p-7f + 0x1p-8f,
                          -3.14159f,
                          2.71828f,
                          3e38f,
                          -3.4e38f,
                          std::numeric_limits<float>::quiet_NaN()};
  Rng rng(6);
  for (int i = 0; i < 1000; ++i) x.push_back(bits_to_f32(uint32_t(rng.next_u64())));  // any bit pattern
  const ActRowFns& ref = act_row_fns(Isa::kScalar);
  for (Isa isa : testing::isas_here()) {
    const ActRowFns& f = act_row_fns(isa);
    for (int which = 0; which < 2; ++which) {
      std::vector<float> a(x.size()), b(x.size());
      (which ? ref.round_bf16 : ref.round_f16)(x.data(), int64_t(x.size()), a.data());
      (which ? f.round_bf16 : f.round_f16)(x.data(), int64_t(x.size()), b.data());
      for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(a[i])) {
          EXPECT_TRUE(std::isnan(b[i])) << i;
          continue;
        }
        ASSERT_EQ(f32_to_bits(a[i]), f32_to_bits(b[i]))
            << isa_name(isa) << (which ? " bf16 " : " f16 ") << "x=" << x[i] << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace ts::kernels
