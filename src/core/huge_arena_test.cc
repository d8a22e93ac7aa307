#include "core/huge_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

namespace ts {
namespace {

TEST(HugeArena, BumpsAlignedUntilFull) {
  HugeArena a(3 << 20);  // rounded up to 4 MiB
  ASSERT_EQ(a.capacity(), size_t(4) << 20);
  uint8_t* p = a.alloc(100);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t(2) << 20), 0u);  // starts on a 2 MiB page
  for (int i = 0; i < 100; ++i) EXPECT_EQ(p[i], 0);                   // zero-filled
  std::memset(p, 0xAB, 100);
  uint8_t* q = a.alloc(10, 64);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q - p, 128);  // after p's 100 bytes, at the next 64-byte boundary
  EXPECT_EQ(a.used(), 138u);
  EXPECT_EQ(a.alloc(a.capacity()), nullptr);  // too big for the rest: nothing taken
  EXPECT_EQ(a.used(), 138u);
  uint8_t* r = a.alloc(a.capacity() - 192, 64);  // exactly the rest
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(a.used(), a.capacity());
  r[a.capacity() - 193] = 1;  // the last byte is writable
  EXPECT_EQ(a.alloc(1, 1), nullptr);
}

TEST(HugeArena, EmptyArena) {
  HugeArena a(0);
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_EQ(a.alloc(1), nullptr);
}

}  // namespace
}  // namespace ts
