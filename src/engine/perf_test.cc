#include "engine/perf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace ts::engine {
namespace {

TEST(Perf, LogitsHashIsFnv1a) {
  // One word-wise FNV-1a step per float.
  const float one = 1.0f;  // 0x3f800000
  EXPECT_EQ(fnv1a_update(kFnvOffset, std::span<const float>(&one, 1)), (kFnvOffset ^ 0x3f800000ull) * 0x100000001b3ull);
  std::vector<float> a = {1.0f, 2.0f}, b = {1.0f, 2.0000002f};
  EXPECT_NE(fnv1a_update(kFnvOffset, a), fnv1a_update(kFnvOffset, b));
  // Chained per step == one pass over the concatenation.
  EXPECT_EQ(fnv1a_update(fnv1a_update(kFnvOffset, std::span<const float>(a).first(1)), std::span<const float>(a).last(1)),
            fnv1a_update(kFnvOffset, a));
}

TEST(Perf, PeakBandwidthCache) {
  const std::string path = std::string(TS_BINARY_DIR) + "/peak_bw_test_cache";
  std::remove(path.c_str());
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_TRUE(f);
    std::fputs("123.5\n", f);
    std::fclose(f);
  }
  EXPECT_DOUBLE_EQ(peak_read_bandwidth_gbs(path), 123.5);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ts::engine
