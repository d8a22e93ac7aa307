// Black-box tests of `tierserve make-model` (src/models/make_model.cc): the same arguments
// give the same bytes, the files carry what llama.cpp needs, the type mixes are llama.cpp's,
// every architecture x type loads in our engine, and the generated vocabularies tokenize
// exactly as llama.cpp tokenizes them (tests/data/golden/oracle/vocab-*.json, written by
// scripts/oracle/gen_logits.py).
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model.h"
#include "gguf/gguf.h"
#include "models/register.h"
#include "tokenizer/tokenizer.h"

namespace ts {
namespace {

const std::vector<std::string> kArchs = {"llama", "qwen2", "qwen3"};
const std::vector<std::string> kTypes = {"f32",  "f16",  "bf16", "q8_0", "q4_0", "q4_1",  "q5_0",
                                         "q5_1", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"};

std::string tmp_dir() {
  static const std::string dir = [] {
    const std::string d = std::string(TS_BINARY_DIR) + "/make_model_test";
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Runs `tierserve make-model ARGS` and returns its exit status (stderr goes to a log).
int run_make_model(const std::string& args) {
  const std::string cmd = std::string("'") + TS_TIERSERVE_BIN + "' make-model " + args + " 2>>'" + tmp_dir() +
                          "/make-model.log' >/dev/null";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// Writes (once per test binary run) the model and returns its path.
std::string model(const std::string& arch, const std::string& shape, const std::string& type, int seed = 1) {
  static std::map<std::string, std::string> made;
  const std::string name = arch + "-" + shape + "-" + type + "-s" + std::to_string(seed);
  auto it = made.find(name);
  if (it != made.end()) return it->second;
  const std::string path = tmp_dir() + "/" + name + ".gguf";
  const int rc = run_make_model("--arch " + arch + " --shape " + shape + " --type " + type + " --seed " +
                                std::to_string(seed) + " -o '" + path + "'");
  EXPECT_EQ(rc, 0) << "make-model failed for " << name << " (see " << tmp_dir() << "/make-model.log)";
  made[name] = path;
  return path;
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

std::unique_ptr<gguf::File> open_gguf(const std::string& path) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  return f.is_ok() ? std::move(f).value() : nullptr;
}

std::map<std::string, int> type_counts(const gguf::File& f) {
  std::map<std::string, int> counts;
  for (const auto& t : f.tensors()) ++counts[dtype_name(t.type)];
  return counts;
}

TEST(MakeModel, SameArgumentsSameBytesWithAnyThreadCount) {
  for (const char* type : {"q4_k_m", "bf16"}) {
    const std::string a = tmp_dir() + "/det-a.gguf", b = tmp_dir() + "/det-b.gguf";
    const std::string args = std::string("--arch qwen2 --shape tiny --type ") + type + " --seed 7";
    ASSERT_EQ(run_make_model(args + " -t 1 -o '" + a + "'"), 0);
    ASSERT_EQ(run_make_model(args + " -t 3 -o '" + b + "'"), 0);
    const auto ba = read_bytes(a), bb = read_bytes(b);
    ASSERT_GT(ba.size(), 100000u);
    EXPECT_TRUE(ba == bb) << type << ": same arguments gave different bytes";
  }
}

TEST(MakeModel, SeedChangesWeightsNotVocabulary) {
  const auto a = open_gguf(model("llama", "tiny", "q8_0", 1));
  const auto b = open_gguf(model("llama", "tiny", "q8_0", 2));
  ASSERT_TRUE(a && b);
  const auto* ta = a->find_tensor("blk.0.attn_q.weight");
  const auto* tb = b->find_tensor("blk.0.attn_q.weight");
  ASSERT_TRUE(ta && tb);
  ASSERT_EQ(ta->n_bytes, tb->n_bytes);
  EXPECT_NE(0, std::memcmp(ta->data, tb->data, ta->n_bytes)) << "different seeds gave the same weights";
  const auto* va = a->get_array("tokenizer.ggml.tokens");
  const auto* vb = b->get_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(va && vb);
  ASSERT_EQ(va->size(), vb->size());
  for (uint64_t i = 0; i < va->size(); ++i) ASSERT_EQ(va->string_at(i), vb->string_at(i)) << "token " << i;
}

// The keys llama.cpp reads for these architectures, with the tiny shape's values.
TEST(MakeModel, CarriesLlamaCppMetadata) {
  for (const auto& arch : kArchs) {
    SCOPED_TRACE(arch);
    const auto f = open_gguf(model(arch, "tiny", "q8_0"));
    ASSERT_TRUE(f);
    EXPECT_EQ(*f->get_string("general.architecture"), arch);
    EXPECT_TRUE(f->get_string("general.name").is_ok());
    EXPECT_EQ(*f->get_int("general.file_type"), 7);  // LLAMA_FTYPE_MOSTLY_Q8_0
    EXPECT_EQ(*f->get_int(arch + ".context_length"), 2048);
    EXPECT_EQ(*f->get_int(arch + ".embedding_length"), 256);
    EXPECT_EQ(*f->get_int(arch + ".block_count"), 2);
    EXPECT_EQ(*f->get_int(arch + ".feed_forward_length"), 512);
    EXPECT_EQ(*f->get_int(arch + ".attention.head_count"), 4);
    EXPECT_EQ(*f->get_int(arch + ".attention.head_count_kv"), 2);
    EXPECT_EQ(*f->get_int(arch + ".rope.dimension_count"), 64);
    EXPECT_EQ(*f->get_float(arch + ".rope.freq_base"), arch == "llama" ? 10000.0 : 1000000.0);
    EXPECT_GT(*f->get_float(arch + ".attention.layer_norm_rms_epsilon"), 0.0);
    EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), arch == "llama" ? "llama" : "gpt2");
    const auto* tokens = f->get_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens);
    EXPECT_EQ(tokens->size(), 1024u);
    EXPECT_EQ(f->get_array("tokenizer.ggml.token_type")->size(), 1024u);
    if (arch == "llama") {
      EXPECT_EQ(f->get_array("tokenizer.ggml.scores")->size(), 1024u);
      EXPECT_EQ(tokens->string_at(1), "<s>");
      EXPECT_EQ(tokens->string_at(3 + 0x41), "<0x41>");
      EXPECT_TRUE(f->find_tensor("output.weight"));
    } else {
      EXPECT_EQ(*f->get_string("tokenizer.ggml.pre"), "qwen2");
      EXPECT_GT(f->get_array("tokenizer.ggml.merges")->size(), 700u);
      EXPECT_EQ(tokens->string_at(1021), "<|endoftext|>");
      EXPECT_EQ(tokens->string_at(1023), "<|im_end|>");
      EXPECT_FALSE(f->find_tensor("output.weight"));  // tied embeddings
    }
    EXPECT_EQ(arch == "qwen2", f->find_tensor("blk.1.attn_q.bias") != nullptr);
    EXPECT_EQ(arch == "qwen3", f->find_tensor("blk.1.attn_k_norm.weight") != nullptr);
    // Plain types: every 2-D weight has the type, vectors stay F32.
    for (const auto& t : f->tensors()) EXPECT_EQ(t.type, t.n_dims == 2 ? DType::Q8_0 : DType::F32) << t.name;
  }
}

// Tensor type counts as llama.cpp's own quantizer (llama_model_quantize, the pinned
// llama-cpp-python) produces them from the same model; scripts/oracle/check_type_mix.py
// compares every tensor, including the 0.5b shape (896-wide rows: Q5_0/Q8_0 fallbacks).
TEST(MakeModel, TypeMixesMatchLlamaCpp) {
  struct Case {
    const char* arch;
    const char* shape;
    const char* type;
    std::map<std::string, int> counts;
  };
  const Case cases[] = {
      {"qwen3", "tiny", "q4_k_m", {{"f32", 9}, {"q4_K", 12}, {"q6_K", 3}}},
      {"qwen3", "tiny", "q5_k_m", {{"f32", 9}, {"q5_K", 12}, {"q6_K", 3}}},
      {"llama", "tiny", "q4_k_m", {{"f32", 5}, {"q4_K", 13}, {"q6_K", 3}}},
      // 288-wide rows are not whole 256-blocks: llama.cpp falls back to 32-blocks.
      {"llama", "15m", "q4_k_m", {{"f32", 13}, {"q5_0", 35}, {"q4_K", 4}, {"q8_0", 3}, {"q6_K", 2}}},
      {"llama", "15m", "q5_k_m", {{"f32", 13}, {"q5_1", 35}, {"q5_K", 4}, {"q8_0", 3}, {"q6_K", 2}}},
      {"llama", "15m", "q6_k", {{"f32", 13}, {"q8_0", 38}, {"q6_K", 6}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.arch) + " " + c.shape + " " + c.type);
    const auto f = open_gguf(model(c.arch, c.shape, c.type));
    ASSERT_TRUE(f);
    EXPECT_EQ(type_counts(*f), c.counts);
  }
  const auto f = open_gguf(model("llama", "tiny", "q4_k_m"));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->find_tensor("output.weight")->type, DType::Q6_K);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, DType::Q4_K);
  EXPECT_EQ(f->find_tensor("blk.0.attn_v.weight")->type, DType::Q4_K);
  EXPECT_EQ(f->find_tensor("blk.1.attn_v.weight")->type, DType::Q6_K);  // use_more_bits(1, 2)
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down.weight")->type, DType::Q6_K);
  EXPECT_EQ(*f->get_int("general.file_type"), 15);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
}

TEST(MakeModel, EveryArchAndTypeLoadsInTheEngine) {
  models::register_all();
  for (const auto& arch : kArchs) {
    for (const auto& type : kTypes) {
      SCOPED_TRACE(arch + " " + type);
      engine::ModelOptions opts;
      opts.n_threads = 1;
      auto m = engine::Model::load(model(arch, "tiny", type), opts);
      ASSERT_TRUE(m.is_ok()) << m.status().to_string();
      const auto& c = (*m)->config();
      EXPECT_EQ(c.arch, arch);
      EXPECT_EQ(c.n_vocab, 1024);
      EXPECT_EQ(c.n_embd, 256);
      EXPECT_EQ(c.n_layer, 2);
      EXPECT_EQ(c.n_head, 4);
      EXPECT_EQ(c.n_head_kv, 2);
      EXPECT_EQ(c.head_dim, 64);
      EXPECT_EQ(c.n_ff, 512);
    }
  }
  // Fallback types (row length 288) load too.
  auto m = engine::Model::load(model("llama", "15m", "q4_k_m"));
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ((*m)->config().n_vocab, 32000);
}

// Our tokenizer on the generated vocabularies gives llama.cpp's ids, and decoding gives the
// text back.
TEST(MakeModel, VocabulariesTokenizeLikeLlamaCpp) {
  const std::string dir = std::string(TS_SOURCE_DIR) + "/tests/data/golden/oracle";
  int n_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string fname = entry.path().filename().string();
    if (fname.rfind("vocab-", 0) != 0) continue;
    ++n_files;
    SCOPED_TRACE(fname);
    std::ifstream in(entry.path());
    const auto g = nlohmann::json::parse(in);
    const auto& mi = g.at("model");
    const auto f = open_gguf(model(mi.at("arch"), mi.at("shape"), "q8_0"));
    ASSERT_TRUE(f);
    ASSERT_EQ(*f->get_int("tierserve.maker_version"), mi.at("maker_version").get<int64_t>())
        << "the model maker changed: regenerate the goldens (scripts/oracle/gen_logits.py)";
    auto tok = tok::Tokenizer::from_gguf(*f);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    EXPECT_EQ((*tok)->n_vocab(), g.at("n_vocab").get<int>());
    const bool spm = mi.at("arch") == "llama";
    for (const auto& c : g.at("cases")) {
      const std::string text = c.at("text");
      SCOPED_TRACE("text: " + text);
      const auto ids_special = (*tok)->encode(text, /*add_special=*/true, /*parse_special=*/true);
      const auto ids_plain = (*tok)->encode(text, /*add_special=*/false, /*parse_special=*/false);
      EXPECT_EQ(ids_special, c.at("ids_add_special_parse_special").get<std::vector<tok::TokenId>>());
      EXPECT_EQ(ids_plain, c.at("ids_plain").get<std::vector<tok::TokenId>>());
      // SentencePiece adds a space before the text; a decoder may keep or strip it.
      const std::string back = (*tok)->decode(ids_plain);
      EXPECT_TRUE(back == text || (spm && back == " " + text)) << "decoded: '" << back << "'";
    }
  }
  EXPECT_GE(n_files, 4) << "tokenizer goldens missing in " << dir;
}

TEST(MakeModel, BadArgumentsFailCleanly) {
  const std::string out = tmp_dir() + "/bad.gguf";
  EXPECT_EQ(run_make_model("--arch gemma9 --shape tiny --type q8_0 -o '" + out + "'"), 2);
  EXPECT_EQ(run_make_model("--arch llama --shape 7b --type q8_0 -o '" + out + "'"), 2);
  EXPECT_EQ(run_make_model("--arch llama --shape tiny --type q3_k -o '" + out + "'"), 2);
  EXPECT_EQ(run_make_model("--arch llama --shape tiny --type q8_0"), 2);  // no output
  EXPECT_EQ(run_make_model("--arch llama --shape tiny --type q8_0 -o /nonexistent-dir/x.gguf"), 1);
  EXPECT_EQ(run_make_model("--help"), 0);
}

}  // namespace
}  // namespace ts
