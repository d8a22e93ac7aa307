// The crafted bad-file corpus: every committed file under tests/data/gguf_bad/ gives
// exactly the status code, message substring and byte offset listed in MANIFEST.txt, and
// the committed files are what the generator (testing/bad_files.cc) produces today.
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "testing/bad_files.h"

namespace ts::gguf {
namespace {

const std::string kBadDir = std::string(TS_SOURCE_DIR) + "/tests/data/gguf_bad";
const std::string kSeedDir = std::string(TS_SOURCE_DIR) + "/fuzz/seeds";
constexpr const char* kRegenerate = "run: gguf_make_testdata tests/data/gguf_bad fuzz/seeds";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void expect_error(const Status& st, const std::string& code, const std::string& substring, uint64_t at) {
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(status_code_name(st.code()), code) << st.to_string();
  EXPECT_NE(st.message().find(substring), std::string::npos) << "want substring: " << substring << "\n got: "
                                                             << st.message();
  EXPECT_TRUE(ends_with(st.message(), " at byte " + std::to_string(at))) << st.message();
}

TEST(GgufBadFiles, EveryManifestEntryGivesItsError) {
  const std::string text = read_all(kBadDir + "/MANIFEST.txt");
  ASSERT_FALSE(text.empty()) << "missing " << kBadDir << "/MANIFEST.txt; " << kRegenerate;
  auto entries = testing::parse_manifest(text);
  ASSERT_TRUE(entries.is_ok()) << entries.status().to_string();
  EXPECT_GE(entries->size(), 24u);
  std::set<std::string> names;
  for (const auto& e : *entries) {
    SCOPED_TRACE(e.name);
    EXPECT_TRUE(names.insert(e.name).second) << "listed twice";
    auto f = File::open(kBadDir + "/" + e.name);
    ASSERT_FALSE(f.is_ok()) << "parsed a bad file";
    expect_error(f.status(), e.code, e.substring, e.at);
    // open() names the file.
    EXPECT_EQ(f.status().message().rfind(kBadDir + "/" + e.name + ": ", 0), 0u) << f.status().message();
  }
}

TEST(GgufBadFiles, CommittedFilesMatchTheGenerator) {
  const auto bad = testing::make_bad_files();
  EXPECT_EQ(read_all(kBadDir + "/MANIFEST.txt"), testing::manifest_text(bad)) << kRegenerate;
  for (const auto& f : bad) {
    SCOPED_TRACE(f.name);
    const std::string committed = read_all(kBadDir + "/" + f.name);
    EXPECT_EQ(committed, std::string(f.bytes.begin(), f.bytes.end())) << kRegenerate;
    EXPECT_LE(f.bytes.size(), 4096u) << "keep crafted files small";
  }
  for (const auto& s : testing::make_seed_files()) {
    SCOPED_TRACE(s.name);
    EXPECT_EQ(read_all(kSeedDir + "/" + s.name), std::string(s.bytes.begin(), s.bytes.end())) << kRegenerate;
  }
}

TEST(GgufBadFiles, GeneratedFilesFailInMemoryToo) {
  for (const auto& f : testing::make_bad_files()) {
    SCOPED_TRACE(f.name);
    auto r = File::parse(f.bytes);
    ASSERT_FALSE(r.is_ok());
    expect_error(r.status(), status_code_name(f.code), f.substring, f.at);
  }
}

// Each group of rules the issue lists has at least one file.
TEST(GgufBadFiles, CoversEveryRuleFamily) {
  std::set<std::string> names;
  for (const auto& f : testing::make_bad_files()) names.insert(f.name);
  for (const char* want :
       {"empty.gguf", "bad_magic.gguf", "version1.gguf", "version_unknown.gguf", "big_endian.gguf",
        "truncated_tensor_count.gguf", "truncated_kv_key.gguf", "truncated_kv_value.gguf", "truncated_string.gguf",
        "truncated_string_array.gguf", "truncated_tensor_dims.gguf", "truncated_tensor_data.gguf",
        "huge_kv_count.gguf", "huge_tensor_count.gguf", "huge_string_length.gguf", "huge_array_count.gguf",
        "unknown_value_type.gguf", "unknown_tensor_type.gguf", "dim_zero.gguf", "dim_negative.gguf",
        "n_dims_zero.gguf", "n_dims_five.gguf", "shape_overflow.gguf", "ne0_not_multiple_of_block.gguf",
        "offset_not_aligned.gguf", "tensor_past_end.gguf", "overlapping_tensors.gguf",
        "alignment_not_power_of_two.gguf", "alignment_zero.gguf", "duplicate_key.gguf", "duplicate_tensor_name.gguf",
        "non_utf8_key.gguf", "non_utf8_tensor_name.gguf", "nested_array_too_deep.gguf"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
}

TEST(GgufSeeds, AllParse) {
  for (const auto& s : testing::make_seed_files()) {
    SCOPED_TRACE(s.name);
    auto r = File::parse(s.bytes);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  }
}

}  // namespace
}  // namespace ts::gguf
