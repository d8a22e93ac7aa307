// The reader on damaged input: every prefix of valid files, and seeded random byte flips.
// The promise is a clean Status naming a byte offset (or a valid File that keeps every
// invariant walk_file checks), never a crash, hang or huge allocation. The libFuzzer
// target (fuzz/gguf_fuzz.cc) explores further; this runs in every CTest pass.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "core/mmap_file.h"
#include "core/rng.h"
#include "gguf/gguf.h"
#include "testing/bad_files.h"
#include "testing/walk.h"

namespace ts::gguf {
namespace {

const std::string kModel = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";

// End of the last tensor's data: prefixes at least this long lose only trailing padding.
uint64_t data_end(const File& f) {
  uint64_t end = f.data_offset();
  for (const auto& t : f.tensors()) end = std::max<uint64_t>(end, f.data_offset() + t.offset + t.n_bytes);
  return end;
}

void expect_clean(const Result<std::unique_ptr<File>>& r) {
  if (r.is_ok()) {
    testing::walk_file(**r);
    return;
  }
  const Status& s = r.status();
  EXPECT_TRUE(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kUnimplemented) << s.to_string();
  EXPECT_NE(s.message().find(" at byte "), std::string::npos) << s.to_string();
}

void check_every_prefix(std::span<const uint8_t> bytes, uint64_t stride_after) {
  auto full = File::parse(bytes);
  ASSERT_TRUE(full.is_ok()) << full.status().to_string();
  const uint64_t end = data_end(**full);
  const bool has_tensors = !(*full)->tensors().empty();
  for (uint64_t n = 0; n < bytes.size(); n += (n < stride_after ? 1 : 997)) {
    auto r = File::parse(bytes.first(n));
    if (r.is_ok()) {
      // Only trailing padding (or, without tensors, nothing at all) may be cut.
      EXPECT_TRUE(has_tensors ? n >= end : n >= (*full)->data_offset() - (*full)->alignment()) << "prefix " << n;
      testing::walk_file(**r);
    } else {
      EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << "prefix " << n << ": " << r.status().to_string();
      EXPECT_NE(r.status().message().find(" at byte "), std::string::npos) << r.status().to_string();
    }
  }
}

TEST(GgufRobustness, EveryPrefixOfEverySeed) {
  for (const auto& s : testing::make_seed_files()) {
    SCOPED_TRACE(s.name);
    check_every_prefix(s.bytes, s.bytes.size());
  }
}

// Every prefix through the end of the tensor infos, then every 997th into the data.
TEST(GgufRobustness, PrefixesOfTheSharedModel) {
  auto m = MappedFile::open(kModel);
  ASSERT_TRUE(m.is_ok());
  auto full = File::parse((*m)->bytes());
  ASSERT_TRUE(full.is_ok());
  check_every_prefix((*m)->bytes(), (*full)->data_offset() + 64);
}

// Flip 1..8 random bytes (seeded, so failures reproduce) and parse.
void flip_test(std::span<const uint8_t> original, uint64_t region, int iterations, uint64_t seed,
               bool report = true) {
  Rng rng(seed);
  std::vector<uint8_t> bytes(original.begin(), original.end());
  int parsed_ok = 0;
  for (int it = 0; it < iterations; ++it) {
    std::copy(original.begin(), original.end(), bytes.begin());
    const int flips = 1 + int(rng.next_u64() % 8);
    for (int k = 0; k < flips; ++k) {
      const uint64_t pos = rng.next_u64() % region;
      // Mostly single-bit flips; sometimes a whole byte of 0x00 / 0xFF / random.
      switch (rng.next_u64() % 4) {
        case 0: bytes[pos] = 0xFF; break;
        case 1: bytes[pos] = uint8_t(rng.next_u64()); break;
        default: bytes[pos] ^= uint8_t(1u << (rng.next_u64() % 8)); break;
      }
    }
    auto r = File::parse(bytes);
    parsed_ok += r.is_ok();
    expect_clean(r);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "iteration " << it << " (seed " << seed << ")";
      return;
    }
  }
  if (report) std::printf("  %d/%d damaged files still parsed\n", parsed_ok, iterations);
}

TEST(GgufRobustness, RandomFlipsInSeeds) {
  uint64_t seed = 1;
  for (const auto& s : testing::make_seed_files()) {
    SCOPED_TRACE(s.name);
    flip_test(s.bytes, s.bytes.size(), 5000, seed++);
  }
}

TEST(GgufRobustness, RandomFlipsInTheSharedModelHeader) {
  auto m = MappedFile::open(kModel);
  ASSERT_TRUE(m.is_ok());
  auto full = File::parse((*m)->bytes());
  ASSERT_TRUE(full.is_ok());
  flip_test((*m)->bytes(), (*full)->data_offset(), 3000, 42);
}

// Bad files with random flips on top: errors after errors.
TEST(GgufRobustness, RandomFlipsInBadFiles) {
  uint64_t seed = 100;
  for (const auto& f : testing::make_bad_files()) {
    if (f.bytes.empty()) continue;
    SCOPED_TRACE(f.name);
    flip_test(f.bytes, f.bytes.size(), 200, seed++, /*report=*/false);
  }
}

}  // namespace
}  // namespace ts::gguf
