// The reader on real files (the shared model and tokenizer vocabularies), on every value
// type and nested arrays, and its speed on a 262,144-entry vocabulary and a 1 GB model.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "testing/bad_files.h"
#include "testing/byte_builder.h"
#include "testing/walk.h"

namespace ts::gguf {
namespace {

const std::string kModel = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kTokenizerDir = std::string(TS_SHARED_DIR) + "/testdata/tokenizer";

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<uint8_t> seed(const std::string& name) {
  for (auto& s : testing::make_seed_files())
    if (s.name == name) return s.bytes;
  ADD_FAILURE() << "no seed " << name;
  return {};
}

TEST(GgufReader, Stories260K) {
  auto r = File::open(kModel);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const File& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
  EXPECT_EQ(*f.get_int("llama.block_count"), 5);
  EXPECT_EQ(*f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(*f.get_int("llama.attention.head_count_kv"), 4);
  EXPECT_NEAR(*f.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);

  const Value* tokens = f.get_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->elem_type(), ValueType::kString);
  EXPECT_EQ(tokens->size(), 512u);
  EXPECT_EQ(tokens->string_at(0), "<unk>");
  EXPECT_EQ(tokens->string_at(1), "<s>");
  EXPECT_EQ(tokens->string_at(2), "</s>");
  const Value* scores = f.get_array("tokenizer.ggml.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(scores->elem_type(), ValueType::kFloat32);
  EXPECT_EQ(scores->size(), 512u);
  const Value* types = f.get_array("tokenizer.ggml.token_type");
  ASSERT_NE(types, nullptr);
  EXPECT_EQ(types->int_at(0), 2);
  EXPECT_EQ(types->int_at(3), 6);

  EXPECT_EQ(f.tensors().size(), 48u);
  const TensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, DType::F32);
  EXPECT_EQ(emb->n_dims, 2u);
  EXPECT_EQ(emb->ne[0], 64);
  EXPECT_EQ(emb->ne[1], 512);
  EXPECT_EQ(emb->n_bytes, 64u * 512 * 4);
  EXPECT_EQ(emb->shape_string(), "[64, 512]");
  EXPECT_EQ(emb->data, f.bytes().data() + f.data_offset() + emb->offset);
  const TensorInfo* down = f.find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ne[0], 172);
  EXPECT_EQ(down->ne[1], 64);
  const TensorInfo* norm = f.find_tensor("blk.4.ffn_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->n_dims, 1u);
  EXPECT_EQ(norm->n_rows(), 1);
  EXPECT_EQ(f.find_tensor("blk.5.ffn_norm.weight"), nullptr);
  EXPECT_EQ(f.tensor_bytes(), 1171200u);
  testing::walk_file(f);
}

TEST(GgufReader, TypedLookupErrors) {
  auto r = File::open(kModel);
  ASSERT_TRUE(r.is_ok());
  const File& f = **r;
  auto missing = f.get_int("llama.nope");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("llama.nope"), std::string::npos);
  auto wrong = f.get_int("general.architecture");
  EXPECT_EQ(wrong.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(wrong.status().message().find("has type string, want an integer"), std::string::npos);
  EXPECT_EQ(f.get_string("llama.block_count").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(f.get_bool("llama.block_count").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(f.get_array("general.architecture"), nullptr);
  EXPECT_EQ(f.get_array("absent"), nullptr);
  EXPECT_EQ(f.find("absent"), nullptr);
}

TEST(GgufReader, EveryTokenizerVocabulary) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kTokenizerDir)) {
    if (e.path().extension() != ".gguf") continue;
    SCOPED_TRACE(e.path().string());
    ++n;
    const auto t0 = std::chrono::steady_clock::now();
    auto r = File::open(e.path().string());
    const double ms = ms_since(t0);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const File& f = **r;
    EXPECT_TRUE(f.get_string("general.architecture").is_ok());
    EXPECT_TRUE(f.get_string("tokenizer.ggml.model").is_ok());
    const Value* tokens = f.get_array("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->elem_type(), ValueType::kString);
    EXPECT_GT(tokens->size(), 1000u);
    EXPECT_TRUE(f.tensors().empty());
    testing::walk_file(f);
    std::printf("  %-40s %6zu tokens  %.2f ms\n", e.path().filename().c_str(), size_t(tokens->size()), ms);
  }
  EXPECT_EQ(n, 6);
}

TEST(GgufReader, EveryValueType) {
  const auto bytes = seed("all_value_types.gguf");
  auto r = File::parse(bytes);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const File& f = **r;
  EXPECT_EQ(*f.get_int("t.u8"), 200);
  EXPECT_EQ(*f.get_int("t.i8"), -100);
  EXPECT_EQ(*f.get_int("t.u16"), 60000);
  EXPECT_EQ(*f.get_int("t.i16"), -30000);
  EXPECT_EQ(*f.get_int("t.u32"), 4000000000);
  EXPECT_EQ(*f.get_int("t.i32"), -2000000000);
  // A uint64 above INT64_MAX: no silent wrap in as_int / get_int.
  EXPECT_FALSE(f.find("t.u64")->as_int().has_value());
  EXPECT_EQ(*f.find("t.u64")->as_uint(), 18000000000000000000ull);
  EXPECT_EQ(f.get_int("t.u64").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(*f.get_int("t.i64"), -9000000000000000000ll);
  EXPECT_FALSE(f.find("t.i64")->as_uint().has_value());
  EXPECT_EQ(*f.get_float("t.f32"), 1.5);
  EXPECT_EQ(*f.get_float("t.f64"), -2.25);
  EXPECT_EQ(*f.get_float("t.i32"), -2000000000.0);  // integers convert to float
  EXPECT_FALSE(f.find("t.f32")->as_int().has_value());  // floats never truncate to int
  EXPECT_EQ(*f.get_bool("t.bool"), true);
  EXPECT_EQ(*f.get_int("t.bool"), 1);
  EXPECT_EQ(*f.get_string("t.string"), "h\xc3\xa9llo");
  const Value* s = f.get_array("t.strings");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->size(), 3u);
  EXPECT_EQ(s->string_at(0), "");
  EXPECT_EQ(s->string_at(2), "\xe2\x82\xac");
  const Value* bools = f.get_array("t.bools");
  ASSERT_NE(bools, nullptr);
  EXPECT_EQ(bools->elem_type(), ValueType::kBool);
  EXPECT_EQ(bools->int_at(0), 1);
  EXPECT_EQ(bools->int_at(1), 0);
  const Value* u16s = f.get_array("t.u16s");
  ASSERT_NE(u16s, nullptr);
  EXPECT_EQ(u16s->int_at(1), 2);
  EXPECT_EQ(u16s->float_at(1), 2.0);
  EXPECT_EQ(u16s->array_bytes().size(), 4u);
  // File order is kept.
  EXPECT_EQ(f.metadata().front().first, "t.u8");
  EXPECT_EQ(f.metadata().back().first, "t.u16s");
}

TEST(GgufReader, NestedArrays) {
  const auto bytes = seed("nested_arrays.gguf");
  auto r = File::parse(bytes);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Value* v = (*r)->get_array("t.nested");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->elem_type(), ValueType::kArray);
  ASSERT_EQ(v->size(), 2u);
  EXPECT_EQ(v->array_at(0).elem_type(), ValueType::kString);
  EXPECT_EQ(v->array_at(0).string_at(1), "yz");
  const Value& inner = v->array_at(1).array_at(0);
  EXPECT_EQ(inner.elem_type(), ValueType::kUint8);
  EXPECT_EQ(inner.int_at(2), 3);
  EXPECT_EQ(*(*r)->get_int("t.after"), 7);
}

TEST(GgufReader, FourLevelsOfArraysAreAccepted) {
  testing::ByteBuilder b;
  b.header(0, 1).key("a.b", ValueType::kArray);
  for (int level = 0; level < 3; ++level) b.u32(uint32_t(ValueType::kArray)).u64(1);
  b.u32(uint32_t(ValueType::kInt8)).u64(2).u8(0xFF).u8(1);
  auto r = File::parse(b.bytes());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Value& leaf = (*r)->find("a.b")->array_at(0).array_at(0).array_at(0);
  EXPECT_EQ(leaf.int_at(0), -1);
}

// The cap on nested arrays is checked before anything is allocated for them.
TEST(GgufReader, NestedArrayCap) {
  testing::ByteBuilder b;
  b.header(0, 1).key("a.b", ValueType::kArray).u32(uint32_t(ValueType::kArray));
  const uint64_t count_at = b.pos();
  b.u64(kMaxNestedArrays + 1);
  for (uint64_t i = 0; i <= kMaxNestedArrays; ++i) b.u32(uint32_t(ValueType::kUint8)).u64(0);
  auto r = File::parse(b.bytes());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("nested arrays at byte " + std::to_string(count_at)), std::string::npos)
      << r.status().message();
}

TEST(GgufReader, Version2AndEmptyFile) {
  auto r = File::parse(seed("minimal_v2.gguf"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->version(), 2u);
  auto m = File::parse(seed("minimal.gguf"));
  ASSERT_TRUE(m.is_ok());
  EXPECT_TRUE((*m)->metadata().empty());
  EXPECT_TRUE((*m)->tensors().empty());
  EXPECT_EQ((*m)->data_offset(), 32u);  // past the end: no data section without tensors
}

TEST(GgufReader, OpenMissingFile) {
  auto r = File::open("/nonexistent/x.gguf");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

// The default model has a 262,144-entry vocabulary; parsing it must not copy strings.
TEST(GgufReader, LargeVocabularyParsesFast) {
  constexpr size_t kN = 262144;
  Writer w;
  std::vector<std::string> tokens(kN);
  for (size_t i = 0; i < kN; ++i) tokens[i] = "tok" + std::to_string(i);
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_f32_array("tokenizer.ggml.scores", std::vector<float>(kN, 0.5f));
  w.add_i32_array("tokenizer.ggml.token_type", std::vector<int32_t>(kN, 1));
  const auto bytes = w.to_bytes();
  double best = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = File::parse(bytes);
    best = std::min(best, ms_since(t0));
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ((*r)->get_array("tokenizer.ggml.tokens")->string_at(kN - 1), "tok262143");
    const char* p = (*r)->get_array("tokenizer.ggml.tokens")->string_at(kN - 1).data();
    const char* base = reinterpret_cast<const char*>(bytes.data());
    EXPECT_TRUE(p >= base && p < base + bytes.size()) << "not a view into the bytes";
  }
  std::printf("  262144-token vocabulary (%zu bytes): parsed in %.2f ms\n", bytes.size(), best);
  EXPECT_LT(best, 250.0);  // ~5 ms on a laptop; generous for a loaded CI machine
}

// A 1 GB model as a sparse file (no disk used): parsing must not touch tensor data.
TEST(GgufReader, LargeModelParsesWithoutTouchingData) {
  constexpr int kTensors = 320;
  constexpr uint64_t kRow = 4096, kRows = 400;  // f16: 3.3 MB per tensor, 1 GB in all
  const uint64_t per = kRow * kRows * 2;
  testing::ByteBuilder b;
  b.header(kTensors, 1).kv_str("general.architecture", "llama");
  for (int i = 0; i < kTensors; ++i)
    b.tensor("blk." + std::to_string(i) + ".w", {kRow, kRows}, uint32_t(DType::F16), uint64_t(i) * per);
  b.pad_to(32);
  const uint64_t total = b.pos() + kTensors * per;
  const std::string path = ::testing::TempDir() + "/gguf_sparse_model.gguf";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(b.bytes().data(), 1, b.bytes().size(), f), b.bytes().size());
    std::fclose(f);
    ASSERT_EQ(::truncate(path.c_str(), off_t(total)), 0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto r = File::open(path);
  const double ms = ms_since(t0);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->tensors().size(), size_t(kTensors));
  EXPECT_EQ((*r)->tensor_bytes(), kTensors * per);
  EXPECT_EQ((*r)->find_tensor("blk.319.w")->offset, 319 * per);
  std::printf("  %.0f MB model, %d tensors: opened and parsed in %.2f ms\n", double(total) / 1e6, kTensors, ms);
  EXPECT_LT(ms, 250.0);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace ts::gguf
