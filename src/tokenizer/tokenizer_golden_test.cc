// Golden tokenizer cases from llama.cpp's models/ folder (../shared/testdata/tokenizer):
// ggml-vocab-<name>.gguf.inp holds the inputs, each followed by a line
// "__ggml_vocab_test__"; .out holds the expected ids, one line per input. They were made
// with HuggingFace tokenizers without special tokens (llama.cpp's test-tokenizer-0 runs
// them with add_special = false, parse_special = false): no case starts with BOS.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ts::tok {
namespace {

const std::string kDir = std::string(TS_SHARED_DIR) + "/testdata/tokenizer/";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> read_inputs(const std::string& path) {
  const std::string text = read_all(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  size_t pos = 0;
  while (true) {
    const size_t at = text.find(sep, pos);
    if (at == std::string::npos) break;
    cases.push_back(text.substr(pos, at - pos));
    pos = at + sep.size();
  }
  return cases;
}

std::vector<std::vector<TokenId>> read_outputs(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<TokenId>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<TokenId> ids;
    TokenId id;
    while (ls >> id) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

std::string ids_string(const std::vector<TokenId>& ids) {
  std::string s;
  for (TokenId id : ids) s += " " + std::to_string(id);
  return s;
}

std::string escaped(const std::string& s) {
  std::string e;
  for (char c : s) {
    if (c == '\n') e += "\\n";
    else if (c == '\t') e += "\\t";
    else e += c;
  }
  return e;
}

class GoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenTest, AllCasesMatch) {
  const std::string base = kDir + "ggml-vocab-" + GetParam() + ".gguf";
  auto file = gguf::File::open(base);
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();

  const auto inputs = read_inputs(base + ".inp");
  const auto expected = read_outputs(base + ".out");
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(inputs.size(), expected.size());

  int passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<TokenId> got = (*tok)->encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    if (got == expected[i]) {
      ++passed;
    } else {
      ADD_FAILURE() << GetParam() << " case " << i << " '" << escaped(inputs[i]) << "'\n  expected:"
                    << ids_string(expected[i]) << "\n  got:     " << ids_string(got);
    }
    // The decoded ids give the input back (llama.cpp's test checks the same); with
    // add_special=false the first piece's space prefix is dropped again.
    EXPECT_EQ((*tok)->decode(got), inputs[i]) << GetParam() << " case " << i;
  }
  std::printf("[golden] %-15s %d/%zu cases\n", GetParam(), passed, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(Vocabs, GoldenTest,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "deepseek-coder", "starcoder",
                                           "falcon"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace ts::tok
