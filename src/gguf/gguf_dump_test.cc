// gguf-info output: the text table and the JSON form (parsed back with nlohmann::json),
// including hostile strings that must stay escaped.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf/dump.h"
#include "gguf/gguf.h"
#include "testing/byte_builder.h"

namespace ts::gguf {
namespace {

const std::string kModel = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";

std::vector<uint8_t> sample() {
  Writer w(64);
  w.add_string("general.architecture", "llama");
  w.add_string("evil", "quote\" backslash\\ newline\n bell\x07 bad\xff end");
  w.add_u64("big", ~0ull);
  w.add_f32("eps", 1e-5f);
  w.add_f32("nan", __builtin_nanf(""));
  w.add_bool("flag", true);
  w.add_string_array("tokens", {"<s>", "a", "b", "c", "d", "e", "f", "g", "h", "i"});
  w.add_i32_array("types", {1, 2, 3});
  w.add_tensor("tok", DType::F32, {4, 3}, std::vector<uint8_t>(48, 0));
  w.add_tensor("q", DType::Q8_0, {32, 2}, std::vector<uint8_t>(68, 0));
  return w.to_bytes();
}

TEST(GgufDump, Text) {
  const auto bytes = sample();
  auto f = File::parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  const std::string t = describe_text(**f);
  EXPECT_NE(t.find("GGUF v3, alignment 64, data offset "), std::string::npos) << t;
  EXPECT_NE(t.find("general.architecture"), std::string::npos);
  EXPECT_NE(t.find("\"llama\""), std::string::npos);
  EXPECT_NE(t.find("18446744073709551615"), std::string::npos);
  EXPECT_NE(t.find("array<string>   [10] [\"<s>\", \"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", ...]"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("array<int32>    [3] [1, 2, 3]"), std::string::npos) << t;
  // Hostile bytes are escaped: no raw newline or bell inside the value.
  EXPECT_NE(t.find("newline\\x0a bell\\x07 bad\\xff end"), std::string::npos) << t;
  EXPECT_NE(t.find("tensors: 2"), std::string::npos);
  EXPECT_NE(t.find("q8_0"), std::string::npos);
  EXPECT_NE(t.find("[32, 2]"), std::string::npos);
  EXPECT_NE(t.find("total: 2 tensors, 76 elements, 116 bytes"), std::string::npos) << t;

  DumpOptions opt;
  opt.tensors = false;
  opt.max_array_items = 2;
  const std::string short_text = describe_text(**f, opt);
  EXPECT_EQ(short_text.find("tensors: 2"), std::string::npos);
  EXPECT_NE(short_text.find("[10] [\"<s>\", \"a\", ...]"), std::string::npos) << short_text;
  EXPECT_NE(short_text.find("total: 2 tensors"), std::string::npos);
}

TEST(GgufDump, JsonIsValidAndComplete) {
  const auto bytes = sample();
  auto f = File::parse(bytes);
  ASSERT_TRUE(f.is_ok());
  const std::string s = describe_json(**f);
  nlohmann::json j = nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << s;
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["alignment"], 64);
  ASSERT_EQ(j["metadata"].size(), (*f)->metadata().size());
  auto find = [&](const std::string& key) {
    for (const auto& kv : j["metadata"])
      if (kv["key"] == key) return kv;
    return nlohmann::json();
  };
  EXPECT_EQ(find("general.alignment")["value"], 64);
  EXPECT_EQ(find("general.architecture")["value"], "llama");
  EXPECT_EQ(find("evil")["value"], "quote\" backslash\\ newline\n bell\x07 bad\xef\xbf\xbd end");
  EXPECT_EQ(find("big")["value"].get<uint64_t>(), ~0ull);
  EXPECT_TRUE(find("nan")["value"].is_null());
  EXPECT_EQ(find("flag")["value"], true);
  EXPECT_EQ(find("tokens")["value"]["length"], 10);
  EXPECT_EQ(find("tokens")["value"]["elem_type"], "string");
  EXPECT_EQ(find("tokens")["value"]["head"].size(), 8u);
  EXPECT_EQ(find("types")["value"]["head"], nlohmann::json::array({1, 2, 3}));
  ASSERT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][1]["name"], "q");
  EXPECT_EQ(j["tensors"][1]["type"], "q8_0");
  EXPECT_EQ(j["tensors"][1]["shape"], nlohmann::json::array({32, 2}));
  EXPECT_EQ(j["tensors"][1]["bytes"], 68);
  EXPECT_EQ(j["totals"]["bytes"], 116);
}

TEST(GgufDump, NestedArraysInJson) {
  testing::ByteBuilder b;
  b.header(0, 1).key("n", ValueType::kArray).u32(uint32_t(ValueType::kArray)).u64(1);
  b.u32(uint32_t(ValueType::kFloat64)).u64(1).f64(0.5);
  auto f = File::parse(b.bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto j = nlohmann::json::parse(describe_json(**f), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["metadata"][0]["value"]["head"][0]["head"][0], 0.5);
  EXPECT_NE(describe_text(**f).find("array<array>    [1] [array<float64>[1]]"), std::string::npos)
      << describe_text(**f);
}

TEST(GgufDump, SharedModel) {
  auto f = File::open(kModel);
  ASSERT_TRUE(f.is_ok());
  const std::string t = describe_text(**f);
  EXPECT_NE(t.find("tokenizer.ggml.tokens                    array<string>   [512] [\"<unk>\", \"<s>\", \"</s>\""),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("blk.4.ffn_norm.weight"), std::string::npos);
  EXPECT_NE(t.find("total: 48 tensors, 292800 elements, 1171200 bytes"), std::string::npos);
  auto j = nlohmann::json::parse(describe_json(**f), nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["tensors"].size(), 48u);
}

}  // namespace
}  // namespace ts::gguf
