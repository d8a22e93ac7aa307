// The crafted bad GGUF files. Each case builds the smallest file that reaches one rule of
// the reader (see docs/gguf_format.md) and records where the offending field starts.
//
// Counts are checked against the bytes left before any entry is read (a kv needs >= 14
// bytes, a tensor info >= 33), so a case that truncates inside an entry puts a larger
// entry in front of it: otherwise the count check would fire first.
#include "testing/bad_files.h"

#include <charconv>
#include <cstring>

#include "gguf/gguf.h"
#include "testing/byte_builder.h"

namespace ts::gguf::testing {
namespace {

using B = ByteBuilder;
constexpr StatusCode kDataLoss = StatusCode::kDataLoss;
constexpr StatusCode kUnimplemented = StatusCode::kUnimplemented;
constexpr uint32_t kF32 = uint32_t(DType::F32);
constexpr uint32_t kQ4_0 = uint32_t(DType::Q4_0);
constexpr uint64_t kHeaderBytes = 24;
// A first kv long enough that a truncated second one is not caught by the count check.
constexpr std::string_view kPadKey = "general.description";
constexpr std::string_view kPadValue = "a value long enough to cover the minimum size of the next entry";

class Corpus {
 public:
  void add(std::string name, StatusCode code, uint64_t at, std::string substring, std::string what, B b) {
    files_.push_back({std::move(name) + ".gguf", code, at, std::move(substring), std::move(what), b.take()});
  }
  std::vector<BadFile> take() { return std::move(files_); }

 private:
  std::vector<BadFile> files_;
};

void header_cases(Corpus& c) {
  c.add("empty", kDataLoss, 0, "file is empty", "zero-byte file", B());
  c.add("truncated_magic", kDataLoss, 0, "magic truncated", "file ends inside the magic", B().raw("GG"));
  c.add("bad_magic", kDataLoss, 0, "bad magic 'GGML'", "magic is not GGUF",
        B().raw("GGML").u32(3).u64(0).u64(0));
  c.add("truncated_version", kDataLoss, 4, "version truncated", "file ends inside the version",
        B().raw("GGUF").u16(3));
  c.add("version1", kUnimplemented, 4, "GGUF version 1 is not supported", "GGUF v1 (32-bit counts)",
        B().raw("GGUF").u32(1).u32(0).u32(0));
  c.add("version_unknown", kUnimplemented, 4, "unsupported GGUF version 4", "a future version",
        B().header(0, 0, 4));
  c.add("big_endian", kUnimplemented, 4, "big-endian GGUF files are not supported",
        "version 3 stored big-endian", B().raw("GGUF").u32(0x03000000).zeros(16));
  c.add("truncated_tensor_count", kDataLoss, 8, "tensor count truncated", "file ends inside the tensor count",
        B().raw("GGUF").u32(3).u32(0));
  c.add("truncated_kv_count", kDataLoss, 16, "kv count truncated", "file ends inside the kv count",
        B().raw("GGUF").u32(3).u64(0).u32(0));
  c.add("huge_kv_count", kDataLoss, 16, "kv count 1099511627776 exceeds the cap", "kv count 2^40",
        B().header(0, 1ull << 40).kv_u32("a.b", 1));
  c.add("kv_count_past_end", kDataLoss, 16, "kv count 1000 needs at least 14000 bytes",
        "kv count larger than the file can hold", B().header(0, 1000).kv_u32("a.b", 1));
  c.add("huge_tensor_count", kDataLoss, 8, "tensor count 4611686018427387904 exceeds the cap", "tensor count 2^62",
        B().header(1ull << 62, 0).zeros(64));
  c.add("tensor_count_past_end", kDataLoss, 8, "tensor count 100 needs at least 3300 bytes",
        "tensor count larger than the file can hold", B().header(100, 0).zeros(64));
}

void key_cases(Corpus& c) {
  {
    B b;
    b.header(0, 2).kv_str(kPadKey, kPadValue);
    const uint64_t at = b.pos();
    c.add("truncated_kv_key_length", kDataLoss, at, "kv #1: key truncated", "file ends inside a key's length",
          std::move(b.u32(7)));
  }
  {
    B b;
    b.header(0, 2).kv_str(kPadKey, kPadValue);
    const uint64_t at = b.pos();
    c.add("truncated_kv_key", kDataLoss, at, "key length 40 runs past end of file", "file ends inside a key",
          std::move(b.u64(40).raw("general.na")));
  }
  c.add("huge_key_length", kDataLoss, kHeaderBytes, "key length 4611686018427387904 exceeds the cap of 65535",
        "key length 2^62", B().header(0, 1).u64(1ull << 62).zeros(32));
  c.add("empty_key", kDataLoss, kHeaderBytes, "key is empty", "zero-length key",
        B().header(0, 1).kv_u32("", 1));
  c.add("non_utf8_key", kDataLoss, kHeaderBytes + 8 + 3, "key 'gen\\xffral.name' is not valid UTF-8",
        "key with a 0xFF byte", B().header(0, 1).kv_u32("gen\xffral.name", 1));
  c.add("overlong_utf8_key", kDataLoss, kHeaderBytes + 8 + 1, "is not valid UTF-8 (bad byte at +1)",
        "key with an overlong encoding of '/'", B().header(0, 1).kv_u32("a\xc0\xaf" "b", 1));
  c.add("surrogate_utf8_key", kDataLoss, kHeaderBytes + 8 + 1, "is not valid UTF-8 (bad byte at +1)",
        "key with an encoded UTF-16 surrogate", B().header(0, 1).kv_u32("x\xed\xa0\x80", 1));
  {
    B b;
    b.header(0, 3).kv_str(kPadKey, kPadValue).kv_u32("a.b", 1);
    const uint64_t at = b.pos();
    c.add("duplicate_key", kDataLoss, at, "kv #2 'general.description': duplicate key (first at kv #0)",
          "the same key twice", std::move(b.kv_str(kPadKey, "again")));
  }
}

void value_cases(Corpus& c) {
  {
    B b;
    b.header(0, 2).kv_str(kPadKey, kPadValue).str("a.b");
    const uint64_t at = b.pos();
    c.add("truncated_kv_type", kDataLoss, at, "kv #1 'a.b': value type truncated",
          "file ends inside a value type", std::move(b.u16(4)));
  }
  c.add("unknown_value_type", kDataLoss, kHeaderBytes + 11, "kv #0 'a.b': unknown value type 13",
        "value type 13", B().header(0, 1).key("a.b", ValueType(13)).u32(0));
  {
    B b;
    b.header(0, 2).kv_str(kPadKey, kPadValue).key("a.b", ValueType::kUint32);
    const uint64_t at = b.pos();
    c.add("truncated_kv_value", kDataLoss, at, "kv #1 'a.b': uint32 truncated", "file ends inside a uint32 value",
          std::move(b.u16(1)));
  }
  c.add("bad_bool", kDataLoss, kHeaderBytes + 15, "bool value 2 is neither 0 nor 1", "bool stored as 2",
        B().header(0, 1).key("a.b", ValueType::kBool).u8(2));
  c.add("huge_string_length", kDataLoss, kHeaderBytes + 15,
        "string length 4611686018427387904 exceeds the cap of 1073741824", "string length 2^62",
        B().header(0, 1).key("a.b", ValueType::kString).u64(1ull << 62).raw("abc"));
  c.add("truncated_string", kDataLoss, kHeaderBytes + 15, "string length 100 runs past end of file",
        "file ends inside a string value", B().header(0, 1).key("a.b", ValueType::kString).u64(100).raw("short"));
}

void array_cases(Corpus& c) {
  const uint64_t v = kHeaderBytes + 15;  // first byte of the value of a kv keyed "a.b"
  auto arr = [](ValueType elem) {
    B b;
    b.header(0, 1).key("a.b", ValueType::kArray).u32(uint32_t(elem));
    return b;
  };
  c.add("truncated_array_count", kDataLoss, v + 4, "array count truncated", "file ends inside an array count",
        std::move(arr(ValueType::kInt32).u32(0)));
  c.add("unknown_array_type", kDataLoss, v, "unknown array element type 99", "array element type 99",
        std::move(B().header(0, 1).key("a.b", ValueType::kArray).u32(99).u64(0)));
  c.add("huge_array_count", kDataLoss, v + 4, "array count 2305843009213693952 of uint32 needs at least",
        "uint32 array count 2^61", std::move(arr(ValueType::kUint32).u64(1ull << 61).zeros(8)));
  c.add("array_count_past_end", kDataLoss, v + 4, "array count 1000 of int32 needs at least 4000 bytes, only 100",
        "int32 array longer than the file", std::move(arr(ValueType::kInt32).u64(1000).zeros(100)));
  c.add("huge_string_array_count", kDataLoss, v + 4, "array count 1099511627776 of string needs at least",
        "string array count 2^40 (would reserve 16 TiB of views)",
        std::move(arr(ValueType::kString).u64(1ull << 40).zeros(64)));
  {
    B b = arr(ValueType::kString);
    b.u64(3).str("ab").str("cd");
    const uint64_t at = b.pos();
    c.add("truncated_string_array", kDataLoss, at, "kv #0 'a.b': element 2: string length 50 runs past end of file",
          "third string of an array cut short", std::move(b.u64(50).raw("x")));
  }
  {
    B b = arr(ValueType::kBool);
    b.u64(3).u8(1).u8(0);
    const uint64_t at = b.pos();
    c.add("bad_bool_array", kDataLoss, at, "bool element 2 is 7, neither 0 nor 1", "bool array holding 7",
          std::move(b.u8(7)));
  }
  {
    // Five levels of arrays; the reader accepts four.
    B b = arr(ValueType::kArray);
    b.u64(1).u32(uint32_t(ValueType::kArray)).u64(1).u32(uint32_t(ValueType::kArray)).u64(1);
    const uint64_t at = b.pos();
    b.u32(uint32_t(ValueType::kArray)).u64(1).u32(uint32_t(ValueType::kUint8)).u64(0);
    c.add("nested_array_too_deep", kDataLoss, at, "element 0.0.0: arrays nested deeper than 4 levels",
          "array of array of array of array of array", std::move(b));
  }
  {
    // The first inner array is long enough that the outer count check (12 bytes per
    // inner array) passes.
    B b = arr(ValueType::kArray);
    b.u64(2).u32(uint32_t(ValueType::kUint8)).u64(20).zeros(20);
    const uint64_t at = b.pos();
    c.add("truncated_nested_array", kDataLoss, at, "element 1: array element type truncated",
          "second inner array cut short", std::move(b.u16(0)));
  }
}

void alignment_cases(Corpus& c) {
  const uint64_t v = kHeaderBytes + 8 + kAlignmentKey.size() + 4;
  c.add("alignment_not_power_of_two", kDataLoss, v, "general.alignment 48 is not a power of two",
        "alignment 48", B().header(0, 1).kv_u32(kAlignmentKey, 48));
  c.add("alignment_zero", kDataLoss, v, "general.alignment is 0", "alignment 0",
        B().header(0, 1).kv_u32(kAlignmentKey, 0));
  c.add("alignment_too_big", kDataLoss, v, "general.alignment 16777216 exceeds the cap of 1048576",
        "alignment 16 MiB", B().header(0, 1).kv_u32(kAlignmentKey, 1u << 24));
  c.add("alignment_wrong_type", kDataLoss, v, "general.alignment has type uint64, want uint32",
        "alignment stored as uint64", B().header(0, 1).key(kAlignmentKey, ValueType::kUint64).u64(32));
}

// Tensor infos. `one(...)` builds a file with a single tensor info and enough zeros after
// it to hold 64 f32 values, so only the rule under test can fail.
void tensor_info_cases(Corpus& c) {
  const uint64_t t0 = kHeaderBytes;  // first tensor info when there is no metadata
  {
    B b;
    b.header(2, 1).kv_str(kPadKey, "x");
    const uint64_t at = b.pos();  // the end of the metadata
    c.add("tensor_infos_past_end", kDataLoss, at, "2 tensor infos need at least 66 bytes, only 33 left",
          "tensor count larger than what follows the metadata", std::move(b.tensor("a", {32}, kF32, 0)));
  }
  {
    B b;
    b.header(2, 0).tensor("a", {32}, kF32, 0);
    const uint64_t at = b.pos();
    c.add("truncated_tensor_name", kDataLoss, at, "tensor #1: name length 40 runs past end of file",
          "file ends inside a tensor name", std::move(b.u64(40).raw("blk.0.attn_q.weight.and.then.the.fi")));
  }
  {
    B b;
    b.header(2, 0).tensor("a", {32}, kF32, 0).str("b").u32(4).u64(32).u64(2).u64(2);
    const uint64_t at = b.pos();
    c.add("truncated_tensor_dims", kDataLoss, at, "tensor 'b' (#1): dimension truncated",
          "file ends inside a tensor's dimensions", std::move(b.u32(2)));
  }
  {
    B b;
    b.header(2, 0).tensor("a", {32}, kF32, 0).str("b").u32(2).u64(32).u64(1).u32(kF32);
    const uint64_t at = b.pos();
    c.add("truncated_tensor_offset", kDataLoss, at, "tensor 'b' (#1): offset truncated",
          "file ends inside a tensor's offset", std::move(b.u32(0)));
  }
  c.add("empty_tensor_name", kDataLoss, t0, "tensor #0: tensor name is empty", "zero-length tensor name",
        B().header(1, 0).tensor("", {32}, kF32, 0).zeros(160));
  c.add("non_utf8_tensor_name", kDataLoss, t0 + 8 + 4, "name 'blk.\\xfe.w' is not valid UTF-8",
        "tensor name with a 0xFE byte", B().header(1, 0).tensor("blk.\xfe.w", {32}, kF32, 0).zeros(160));
  c.add("n_dims_zero", kDataLoss, t0 + 9, "tensor 'a' (#0): n_dims 0 is out of range (want 1..4)", "n_dims 0",
        B().header(1, 0).str("a").u32(0).u32(kF32).u64(0).zeros(160));
  c.add("n_dims_five", kDataLoss, t0 + 9, "n_dims 5 is out of range (want 1..4)", "n_dims 5",
        B().header(1, 0).tensor("a", {2, 2, 2, 2, 2}, kF32, 0).zeros(160));
  c.add("dim_zero", kDataLoss, t0 + 9 + 4 + 8, "tensor 'a' (#0): ne[1] is 0", "a dimension of 0",
        B().header(1, 0).tensor("a", {32, 0}, kF32, 0).zeros(160));
  c.add("dim_negative", kDataLoss, t0 + 9 + 4, "ne[0] is negative (-5)", "a dimension of -5",
        B().header(1, 0).tensor("a", {uint64_t(-5)}, kF32, 0).zeros(160));
  c.add("shape_overflow", kDataLoss, t0 + 9 + 4, "shape [4294967296, 4294967296]: element count overflows int64",
        "2^32 x 2^32 elements", B().header(1, 0).tensor("a", {1ull << 32, 1ull << 32}, kF32, 0).zeros(160));
  c.add("shape_bytes_overflow", kDataLoss, t0 + 9 + 4, "shape [4611686018427387904] of f32: byte size overflows",
        "2^62 f32 elements (2^64 bytes)", B().header(1, 0).tensor("a", {1ull << 62}, kF32, 0).zeros(160));
  c.add("ne0_not_multiple_of_block", kDataLoss, t0 + 9 + 4,
        "ne[0] = 33 is not a multiple of the block size 32 of q4_0", "q4_0 row of 33 elements",
        B().header(1, 0).tensor("a", {33}, kQ4_0, 0).zeros(160));
  c.add("unknown_tensor_type", kUnimplemented, t0 + 9 + 4 + 8, "tensor 'a' (#0): unknown tensor type 99",
        "tensor type id 99", B().header(1, 0).tensor("a", {32}, 99, 0).zeros(160));
  c.add("removed_tensor_type", kUnimplemented, t0 + 9 + 4 + 8, "unknown tensor type 4",
        "tensor type id 4 (the removed q4_2)", B().header(1, 0).tensor("a", {32}, 4, 0).zeros(160));
  c.add("offset_not_aligned", kDataLoss, t0 + 9 + 4 + 8 + 4, "offset 4 is not a multiple of the alignment 32",
        "tensor offset 4", B().header(1, 0).tensor("a", {32}, kF32, 4).zeros(160));
  {
    B b;
    b.header(1, 1).kv_u32(kAlignmentKey, 64).tensor("a", {8}, kF32, 32);
    const uint64_t at = b.pos() - 8;
    c.add("offset_not_aligned_custom", kDataLoss, at, "offset 32 is not a multiple of the alignment 64",
          "tensor offset 32 with general.alignment 64", std::move(b.pad_to(64).zeros(128)));
  }
  {
    B b;
    b.header(2, 0).tensor("a", {32}, kF32, 0).str("a").u32(1).u64(32).u32(kF32).u64(128);
    c.add("duplicate_tensor_name", kDataLoss, t0 + 33, "tensor 'a' (#1): duplicate tensor name (first at tensor #0)",
          "two tensors named 'a'", std::move(b.pad_to(32).zeros(256)));
  }
}

void tensor_data_cases(Corpus& c) {
  const uint64_t offset_field = kHeaderBytes + 9 + 4 + 8 + 4;  // of a 1-d tensor named "a"
  {
    B b;
    b.header(1, 0).tensor("a", {64}, kF32, 0).pad_to(32);  // data at 64
    c.add("tensor_past_end", kDataLoss, offset_field, "tensor 'a' (#0): data [64, 320) runs past end of file (size 164)",
          "256 bytes of data, 100 present", std::move(b.zeros(100)));
  }
  {
    B b;
    b.header(1, 0).tensor("a", {64}, kF32, 0xFFFFFFFFFFFFFFE0ull).pad_to(32);
    c.add("tensor_offset_overflow", kDataLoss, offset_field, "data offset 18446744073709551584 + 256 bytes overflows",
          "offset 2^64 - 32", std::move(b.zeros(256)));
  }
  {
    B b;
    b.header(2, 0).tensor("a", {64}, kF32, 0).tensor("b", {64}, kF32, 256);
    const uint64_t at = b.pos() - 8;
    b.pad_to(32);  // data at 96
    c.add("truncated_tensor_data", kDataLoss, at, "tensor 'b' (#1): data [352, 608) runs past end of file (size 400)",
          "file ends inside the second tensor's data", std::move(b.zeros(304)));
  }
  {
    B b;
    b.header(2, 0).tensor("a", {64}, kF32, 0).tensor("b", {64}, kF32, 128);
    const uint64_t at = b.pos() - 8;
    b.pad_to(32);
    c.add("overlapping_tensors", kDataLoss, at,
          "tensor 'b' (#1): data [224, 480) overlaps tensor 'a' (#0) data [96, 352)", "b starts inside a",
          std::move(b.zeros(512)));
  }
}

}  // namespace

std::vector<BadFile> make_bad_files() {
  Corpus c;
  header_cases(c);
  key_cases(c);
  value_cases(c);
  array_cases(c);
  alignment_cases(c);
  tensor_info_cases(c);
  tensor_data_cases(c);
  return c.take();
}

// ---------------------------------------------------------------- valid seeds

namespace {

// Deterministic filler for tensor data.
std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 31 + seed);
  return v;
}

std::vector<uint8_t> all_value_types() {
  Writer w;
  w.add_u8("t.u8", 200);
  w.add_i8("t.i8", -100);
  w.add_u16("t.u16", 60000);
  w.add_i16("t.i16", -30000);
  w.add_u32("t.u32", 4000000000u);
  w.add_i32("t.i32", -2000000000);
  w.add_u64("t.u64", 18000000000000000000ull);
  w.add_i64("t.i64", -9000000000000000000ll);
  w.add_f32("t.f32", 1.5f);
  w.add_f64("t.f64", -2.25);
  w.add_bool("t.bool", true);
  w.add_string("t.string", "h\xc3\xa9llo");
  w.add_string_array("t.strings", {"", "a", "\xe2\x82\xac"});
  w.add_f32_array("t.f32s", {0.5f, -1.0f});
  w.add_i32_array("t.i32s", {1, -2, 3});
  w.add_array("t.bools", ValueType::kBool, 3, {1, 0, 1});
  w.add_array("t.u16s", ValueType::kUint16, 2, {1, 0, 2, 0});
  return w.to_bytes();
}

std::vector<uint8_t> tensors(uint64_t alignment) {
  Writer w(alignment);
  w.add_string("general.architecture", "test");
  w.add_tensor("f32", DType::F32, {8, 2}, pattern(64, 1));
  w.add_tensor("f16", DType::F16, {4}, pattern(8, 2));
  w.add_tensor("q4_0", DType::Q4_0, {32, 2}, pattern(36, 3));
  w.add_tensor("q8_0", DType::Q8_0, {32}, pattern(34, 4));
  w.add_tensor("q4_K", DType::Q4_K, {256}, pattern(144, 5));
  w.add_tensor("bf16", DType::BF16, {3, 1, 2}, pattern(12, 6));
  w.add_tensor("i8.4d", DType::I8, {2, 1, 1, 3}, pattern(6, 7));
  return w.to_bytes();
}

std::vector<uint8_t> nested_arrays() {
  B b;
  b.header(0, 2, 3).key("t.nested", ValueType::kArray).u32(uint32_t(ValueType::kArray)).u64(2);
  b.u32(uint32_t(ValueType::kString)).u64(2).str("x").str("yz");
  b.u32(uint32_t(ValueType::kArray)).u64(1).u32(uint32_t(ValueType::kUint8)).u64(3).u8(1).u8(2).u8(3);
  b.kv_u32("t.after", 7);
  return b.take();
}

std::vector<uint8_t> mini_llama() {
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "mini");
  w.add_u32("llama.context_length", 64);
  w.add_u32("llama.embedding_length", 8);
  w.add_u32("llama.block_count", 1);
  w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<int32_t> types = {2, 3, 3};
  for (int i = 0; i < 29; ++i) {
    tokens.push_back(std::string(1, char('a' + i % 26)) + std::to_string(i));
    scores.push_back(-float(i));
    types.push_back(1);
  }
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_tensor("token_embd.weight", DType::F32, {8, 32}, pattern(8 * 32 * 4, 9));
  w.add_tensor("output_norm.weight", DType::F32, {8}, pattern(32, 10));
  w.add_tensor("blk.0.attn_q.weight", DType::Q8_0, {32, 8}, pattern(34 * 8, 11));
  return w.to_bytes();
}

}  // namespace

std::vector<SeedFile> make_seed_files() {
  std::vector<SeedFile> s;
  s.push_back({"minimal.gguf", B().header(0, 0).take()});
  s.push_back({"minimal_v2.gguf", B().header(0, 1, 2).kv_str("general.name", "v2").take()});
  s.push_back({"all_value_types.gguf", all_value_types()});
  s.push_back({"tensors.gguf", tensors(32)});
  s.push_back({"tensors_align64.gguf", tensors(64)});
  s.push_back({"nested_arrays.gguf", nested_arrays()});
  s.push_back({"mini_llama.gguf", mini_llama()});
  return s;
}

// ---------------------------------------------------------------- manifest

std::string manifest_text(const std::vector<BadFile>& files) {
  std::string out =
      "# Crafted malformed GGUF files. Generated by gguf_make_testdata (src/gguf/testing/bad_files.cc);\n"
      "# checked by gguf_bad_files_test. Columns (tab-separated): file, expected status code,\n"
      "# byte offset the message ends with (\"at byte N\"), message substring, description.\n";
  for (const auto& f : files) {
    out += f.name + "\t" + status_code_name(f.code) + "\t" + std::to_string(f.at) + "\t" + f.substring + "\t" +
           f.what + "\n";
  }
  return out;
}

Result<std::vector<ManifestEntry>> parse_manifest(std::string_view text) {
  std::vector<ManifestEntry> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string_view> cols;
    for (size_t start = 0;;) {
      const size_t tab = line.find('\t', start);
      cols.push_back(line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
      if (tab == std::string_view::npos) break;
      start = tab + 1;
    }
    if (cols.size() < 4) return data_loss("MANIFEST line " + std::to_string(line_no) + ": want >= 4 columns");
    ManifestEntry e;
    e.name = std::string(cols[0]);
    e.code = std::string(cols[1]);
    auto [p, ec] = std::from_chars(cols[2].data(), cols[2].data() + cols[2].size(), e.at);
    if (ec != std::errc() || p != cols[2].data() + cols[2].size())
      return data_loss("MANIFEST line " + std::to_string(line_no) + ": bad byte offset");
    e.substring = std::string(cols[3]);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace ts::gguf::testing
