// Writer: round trips through the reader for every value type and several tensor types,
// alignment handling, determinism, streaming to a file, and misuse reported by validate().
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "le.h"
#include "testing/walk.h"

namespace ts::gguf {
namespace {

std::vector<uint8_t> filler(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 131 + seed);
  return v;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(GgufWriter, ScalarsRoundTrip) {
  Writer w;
  w.add_u8("u8", 255);
  w.add_i8("i8", -128);
  w.add_u16("u16", 65535);
  w.add_i16("i16", -32768);
  w.add_u32("u32", 0xFFFFFFFFu);
  w.add_i32("i32", -7);
  w.add_u64("u64", ~0ull);
  w.add_i64("i64", -(1ll << 62));
  w.add_f32("f32", -0.125f);
  w.add_f64("f64", 1e300);
  w.add_bool("yes", true);
  w.add_bool("no", false);
  w.add_string("s", "tiers");
  w.add_string("empty", "");
  const auto bytes = w.to_bytes();
  auto r = File::parse(bytes);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const File& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.find("u8")->type(), ValueType::kUint8);
  EXPECT_EQ(*f.get_int("u8"), 255);
  EXPECT_EQ(f.find("i8")->type(), ValueType::kInt8);
  EXPECT_EQ(*f.get_int("i8"), -128);
  EXPECT_EQ(*f.get_int("u16"), 65535);
  EXPECT_EQ(f.find("i16")->type(), ValueType::kInt16);
  EXPECT_EQ(*f.get_int("i16"), -32768);
  EXPECT_EQ(*f.get_int("u32"), 0xFFFFFFFFll);
  EXPECT_EQ(*f.get_int("i32"), -7);
  EXPECT_EQ(*f.find("u64")->as_uint(), ~0ull);
  EXPECT_EQ(*f.get_int("i64"), -(1ll << 62));
  EXPECT_EQ(f.find("f32")->type(), ValueType::kFloat32);
  EXPECT_EQ(*f.get_float("f32"), -0.125);
  EXPECT_EQ(f.find("f64")->type(), ValueType::kFloat64);
  EXPECT_EQ(*f.get_float("f64"), 1e300);
  EXPECT_TRUE(*f.get_bool("yes"));
  EXPECT_FALSE(*f.get_bool("no"));
  EXPECT_EQ(*f.get_string("s"), "tiers");
  EXPECT_EQ(*f.get_string("empty"), "");
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufWriter, ArraysOfEveryElementTypeRoundTrip) {
  Writer w;
  w.add_string_array("strings", {"a", "", "\xe4\xb8\xad\xe6\x96\x87", std::string(1000, 'x')});
  w.add_string_array("no_strings", {});
  w.add_f32_array("f32s", {1.0f, -2.5f, 3e-8f});
  w.add_i32_array("i32s", {0, -1, 2147483647});
  struct Case {
    ValueType type;
    std::vector<uint8_t> bytes;
    int64_t last;
  };
  const Case cases[] = {
      {ValueType::kUint8, {1, 2, 250}, 250},
      {ValueType::kInt8, {1, 2, 0xFE}, -2},
      {ValueType::kUint16, {1, 0, 0xFF, 0xFF}, 65535},
      {ValueType::kInt16, {1, 0, 0xFE, 0xFF}, -2},
      {ValueType::kUint32, {0, 0, 0, 0x80}, 0x80000000ll},
      {ValueType::kInt32, {0xFD, 0xFF, 0xFF, 0xFF}, -3},
      {ValueType::kUint64, {5, 0, 0, 0, 0, 0, 0, 0}, 5},
      {ValueType::kInt64, {0xFC, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, -4},
      {ValueType::kBool, {1, 0, 1}, 1},
  };
  for (const auto& c : cases) {
    const uint64_t n = c.bytes.size() / value_type_size(c.type);
    w.add_array(std::string("arr.") + value_type_name(c.type), c.type, n, c.bytes);
  }
  std::vector<uint8_t> f64s;
  le::put_f64(f64s, 0.1);
  le::put_f64(f64s, -1e-300);
  w.add_array("arr.float64", ValueType::kFloat64, 2, f64s);

  const auto bytes = w.to_bytes();
  auto r = File::parse(bytes);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const File& f = **r;
  const Value* s = f.get_array("strings");
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ(s->string_at(1), "");
  EXPECT_EQ(s->string_at(2), "\xe4\xb8\xad\xe6\x96\x87");
  EXPECT_EQ(s->string_at(3).size(), 1000u);
  EXPECT_EQ(f.get_array("no_strings")->size(), 0u);
  EXPECT_EQ(f.get_array("f32s")->float_at(2), double(3e-8f));
  EXPECT_EQ(f.get_array("i32s")->int_at(2), 2147483647);
  for (const auto& c : cases) {
    SCOPED_TRACE(value_type_name(c.type));
    const Value* v = f.get_array(std::string("arr.") + value_type_name(c.type));
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->elem_type(), c.type);
    EXPECT_EQ(v->int_at(v->size() - 1), c.last);
    EXPECT_EQ(std::vector<uint8_t>(v->array_bytes().begin(), v->array_bytes().end()), c.bytes);
  }
  EXPECT_EQ(f.get_array("arr.float64")->float_at(0), 0.1);
  EXPECT_EQ(f.get_array("arr.float64")->float_at(1), -1e-300);
  testing::walk_file(f);
}

TEST(GgufWriter, TensorsRoundTrip) {
  struct Case {
    const char* name;
    DType type;
    std::vector<int64_t> ne;
    size_t bytes;
  };
  const Case cases[] = {
      {"f32", DType::F32, {7}, 28},
      {"f16", DType::F16, {3, 5}, 30},
      {"bf16", DType::BF16, {2, 2, 2}, 16},
      {"q4_0", DType::Q4_0, {64, 3}, 2 * 18 * 3},
      {"q8_0", DType::Q8_0, {32, 1, 2}, 34 * 2},
      {"q4_K", DType::Q4_K, {256, 2}, 144 * 2},
      {"q6_K", DType::Q6_K, {512}, 210 * 2},
      {"i32", DType::I32, {1, 1, 1, 5}, 20},
  };
  Writer w;
  w.add_string("general.architecture", "test");
  uint8_t seed = 0;
  for (const auto& c : cases) w.add_tensor(c.name, c.type, c.ne, filler(c.bytes, seed++));
  const auto bytes = w.to_bytes();
  auto r = File::parse(bytes);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const File& f = **r;
  ASSERT_EQ(f.tensors().size(), std::size(cases));
  seed = 0;
  for (size_t i = 0; i < std::size(cases); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.name);
    const TensorInfo& t = f.tensors()[i];  // file order is insertion order
    EXPECT_EQ(t.name, c.name);
    EXPECT_EQ(t.type, c.type);
    EXPECT_EQ(t.n_dims, c.ne.size());
    for (size_t d = 0; d < c.ne.size(); ++d) EXPECT_EQ(t.ne[d], c.ne[d]);
    EXPECT_EQ(t.n_bytes, c.bytes);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ((t.data - bytes.data()) % 32, 0);
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), filler(c.bytes, seed++));
  }
  testing::walk_file(f);
}

TEST(GgufWriter, AlignmentKeyOnlyWhenNotDefault) {
  Writer w32;
  w32.add_tensor("a", DType::F32, {3}, filler(12, 1));
  auto r32 = File::parse(w32.to_bytes());
  ASSERT_TRUE(r32.is_ok());
  EXPECT_EQ((*r32)->find(kAlignmentKey), nullptr);

  Writer w(256);
  w.add_string("general.name", "x");
  w.add_tensor("a", DType::F32, {3}, filler(12, 1));
  w.add_tensor("b", DType::F32, {100}, filler(400, 2));
  const auto bytes = w.to_bytes();
  auto r = File::parse(bytes);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const File& f = **r;
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.metadata().front().first, kAlignmentKey);  // written first
  EXPECT_EQ(*f.get_int(kAlignmentKey), 256);
  EXPECT_EQ(f.data_offset() % 256, 0u);
  EXPECT_EQ(f.find_tensor("b")->offset, 256u);
  EXPECT_EQ(bytes.size() % 256, 0u);

  // A caller that sets the key itself (to the same value) does not get it twice.
  Writer w2(64);
  w2.add_u32(std::string(kAlignmentKey), 64);
  auto r2 = File::parse(w2.to_bytes());
  ASSERT_TRUE(r2.is_ok()) << r2.status().to_string();
  EXPECT_EQ((*r2)->metadata().size(), 1u);
}

TEST(GgufWriter, DeterministicAndStreamedWriteMatchesToBytes) {
  auto make = [] {
    Writer w(64);
    w.add_string("general.architecture", "llama");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
    w.add_tensor("x", DType::Q8_0, {32, 4}, filler(34 * 4, 3));
    w.add_tensor("y", DType::F16, {5}, filler(10, 4));
    return w;
  };
  const auto a = make().to_bytes();
  const auto b = make().to_bytes();
  EXPECT_EQ(a, b);
  const std::string path = ::testing::TempDir() + "/gguf_writer_test.gguf";
  ASSERT_TRUE(make().write(path).is_ok());
  const std::string on_disk = read_all(path);
  EXPECT_EQ(on_disk, std::string(a.begin(), a.end()));
  EXPECT_FALSE(std::ifstream(path + ".tmp").good()) << "temporary file left behind";
  auto r = File::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->find_tensor("y")->n_bytes, 10u);
  std::remove(path.c_str());
}

TEST(GgufWriter, TensorViewsAreNotCopiedAndSurviveCopies) {
  const std::vector<uint8_t> big = filler(8 << 20, 9);  // 8 MB
  Writer w;
  w.add_tensor_view("big", DType::F32, {1024, 2048}, big);
  Writer copy = w;  // views are recomputed on use, so a copy is safe
  const std::string path = ::testing::TempDir() + "/gguf_writer_view.gguf";
  ASSERT_TRUE(copy.write(path).is_ok());
  auto r = File::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const TensorInfo* t = (*r)->find_tensor("big");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(std::equal(big.begin(), big.end(), t->data));
  std::remove(path.c_str());
}

TEST(GgufWriter, ValidateReportsMisuse) {
  auto code_of = [](const Writer& w) { return w.validate().code(); };
  {
    Writer w;
    w.add_u32("k", 1);
    w.add_u32("k", 2);
    EXPECT_EQ(code_of(w), StatusCode::kInvalidArgument);
    EXPECT_NE(w.validate().message().find("duplicate key 'k'"), std::string::npos);
  }
  {
    Writer w;
    w.add_tensor("t", DType::F32, {4}, filler(16, 0));
    w.add_tensor("t", DType::F32, {4}, filler(16, 0));
    EXPECT_NE(w.validate().message().find("duplicate tensor 't'"), std::string::npos);
  }
  {
    Writer w;
    w.add_tensor("t", DType::F32, {4}, filler(15, 0));
    EXPECT_NE(w.validate().message().find("has 15 bytes of data, its shape and type need 16"), std::string::npos);
  }
  {
    Writer w;
    w.add_tensor("t", DType::Q4_0, {33}, filler(18, 0));
    EXPECT_NE(w.validate().message().find("invalid shape or type"), std::string::npos);
  }
  {
    Writer w;
    w.add_tensor("t", DType::F32, {1, 1, 1, 1, 1}, filler(4, 0));
    EXPECT_EQ(code_of(w), StatusCode::kInvalidArgument);
  }
  {
    Writer w;
    w.add_tensor("t", DType::F32, {0}, {});
    EXPECT_EQ(code_of(w), StatusCode::kInvalidArgument);
  }
  {
    Writer w;
    w.add_u32("bad\xff", 1);
    EXPECT_NE(w.validate().message().find("not UTF-8"), std::string::npos);
  }
  {
    Writer w;
    w.add_tensor("", DType::F32, {1}, filler(4, 0));
    EXPECT_EQ(code_of(w), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(code_of(Writer(48)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code_of(Writer(0)), StatusCode::kInvalidArgument);
  {
    Writer w(64);
    w.add_u32(std::string(kAlignmentKey), 32);  // disagrees with the constructor
    EXPECT_EQ(code_of(w), StatusCode::kInvalidArgument);
  }
  {
    Writer w;
    w.add_u32("k", 1);
    w.add_u32("k", 1);
    const std::string path = ::testing::TempDir() + "/gguf_writer_invalid.gguf";
    EXPECT_EQ(w.write(path).code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(std::ifstream(path).good());
  }
}

TEST(GgufWriter, WriteErrorsAreIoErrors) {
  Writer w;
  w.add_u32("k", 1);
  Status s = w.write("/nonexistent-dir/x.gguf");
  EXPECT_EQ(s.code(), StatusCode::kIo);
  EXPECT_NE(s.message().find("/nonexistent-dir/x.gguf.tmp"), std::string::npos);
}

TEST(GgufWriterDeathTest, ToBytesChecksMisuse) {
  Writer w;
  w.add_u32("k", 1);
  w.add_u32("k", 1);
  EXPECT_DEATH(w.to_bytes(), "duplicate key");
}

}  // namespace
}  // namespace ts::gguf
