#include "core/status.h"

#include <gtest/gtest.h>

#include "core/fp16.h"
#include "core/safe_math.h"

namespace ts {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("not positive: " + std::to_string(x));
  return x;
}

Status use(int x, int* out) {
  TS_ASSIGN_OR_RETURN(int v, parse_positive(x));
  *out = v * 2;
  return Status::ok();
}

TEST(Status, ResultCarriesValueOrError) {
  int out = 0;
  EXPECT_TRUE(use(3, &out).is_ok());
  EXPECT_EQ(out, 6);
  Status s = use(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "InvalidArgument: not positive: -1");
}

TEST(SafeMath, DetectsOverflow) {
  uint64_t r;
  EXPECT_TRUE(checked_mul(1ull << 31, 1ull << 31, &r));
  EXPECT_FALSE(checked_mul(1ull << 33, 1ull << 31, &r));
  EXPECT_FALSE(checked_add(~0ull, 1, &r));
  EXPECT_TRUE(checked_align_up(33, 32, &r));
  EXPECT_EQ(r, 64u);
  EXPECT_FALSE(checked_align_up(~0ull - 3, 32, &r));
}

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = fp16_to_f32(uint16_t(h));
    if (f != f) continue;  // NaN payloads need not round-trip
    EXPECT_EQ(f32_to_fp16(f), uint16_t(h)) << h;
  }
  EXPECT_EQ(fp16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // rounds to +inf
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
}

}  // namespace
}  // namespace ts
