// Black-box tests of `tierserve run`: the real binary on stories260K, compared with the
// llama.cpp goldens, and every kind of bad input ending in a clear message and a non-zero
// exit status (never a signal).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "gguf/gguf.h"
#include "testing/process.h"

namespace ts {
namespace {

const std::string kModel = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kGolden = std::string(TS_SHARED_DIR) + "/testdata/stories260K_greedy.json";
const std::string kWork = std::string(TS_BINARY_DIR) + "/run_cli_test";

using testing_proc::Proc;
using testing_proc::slurp;

// Runs `tierserve run <args>` with stdout and stderr captured in files.
Proc run(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TS_TIERSERVE_BIN, "run"};
  argv.insert(argv.end(), args.begin(), args.end());
  // TIERSERVE_CACHE_DIR: measure the peak bandwidth once.
  return testing_proc::run_captured(argv, kWork + "/stdout", kWork + "/stderr", {{"TIERSERVE_CACHE_DIR", kWork}});
}

class RunCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string cmd = "mkdir -p '" + kWork + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  static nlohmann::json golden() {
    std::ifstream in(kGolden);
    return nlohmann::json::parse(in);
  }
};

TEST_F(RunCli, JsonMatchesGoldenForEveryCase) {
  const auto g = golden();  // (iterating golden()["cases"] would walk a destroyed temporary)
  ASSERT_GE(g["cases"].size(), 4u);
  for (const auto& c : g["cases"]) {
    const std::string prompt = c["prompt"].get<std::string>();
    const Proc p = run({"-m", kModel, "-p", prompt, "-n", "64", "--temp", "0", "-t", "2", "--json"});
    ASSERT_FALSE(p.signaled);
    ASSERT_EQ(p.code, 0) << p.err;
    const auto j = nlohmann::json::parse(p.out);
    for (const char* k : {"prompt_tokens", "tokens", "text", "prompt_ms", "gen_ms", "prompt_tok_s", "gen_tok_s",
                          "logits_hash", "gb_s", "peak_gb_s"})
      EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_EQ(j["prompt_tokens"], c["prompt_tokens"]) << prompt;
    EXPECT_EQ(j["tokens"], c["completion_tokens"]) << prompt;
    EXPECT_EQ(j["text"], c["completion_text"]) << prompt;
    EXPECT_EQ(j["stop_reason"], "length");
    EXPECT_GT(j["prompt_tok_s"].get<double>(), 0.0);
    EXPECT_GT(j["gen_tok_s"].get<double>(), 0.0);
    // 64 tokens, 63 decode passes: the first token is sampled from the prompt's logits.
    EXPECT_EQ(j["decode_passes"], j["tokens"].size() - 1);
  }
}

TEST_F(RunCli, OneTokenHasNoDecodePass) {
  const Proc p = run({"-m", kModel, "-p", "Once upon a time", "-n", "1", "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["tokens"].size(), 1u);
  EXPECT_EQ(j["decode_passes"], 0);
  EXPECT_EQ(j["gen_tok_s"], 0.0);  // no decode speed to report (it used to divide 1 token by the sampling time)
  EXPECT_EQ(j["gb_s"], 0.0);
}

// --json names the matrix kernels' path, which TIERSERVE_ISA (inherited by the child) picks;
// every path gives the golden tokens.
TEST_F(RunCli, JsonNamesTheKernelPath) {
  const auto c = golden()["cases"][0];
  const auto want_tokens = c["completion_tokens"].get<std::vector<int>>();
  ASSERT_GE(want_tokens.size(), 4u);
  std::vector<std::pair<std::string, std::string>> cases = {{"scalar", "scalar"}};
  if (cpu_features().avx512_vnni) cases.push_back({"amx-emulated", "amx"});
  for (const auto& [isa, want] : cases) {
    setenv("TIERSERVE_ISA", isa.c_str(), 1);
    const Proc p = run({"-m", kModel, "-p", c["prompt"].get<std::string>(), "-n", "4", "--temp", "0", "--json"});
    unsetenv("TIERSERVE_ISA");
    ASSERT_EQ(p.code, 0) << p.err;
    const auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["kernels"], want) << isa;
    EXPECT_EQ(j["attention"], "on");  // llama.cpp's flash-attention rounding, the default
    EXPECT_EQ(j["tokens"].get<std::vector<int>>(), std::vector<int>(want_tokens.begin(), want_tokens.begin() + 4))
        << isa;
  }
}

// The F32-tile attention (--fa tiled) also gives llama.cpp's greedy tokens on every golden
// case; an unknown numerics name is a usage error.
TEST_F(RunCli, TiledAttentionGivesTheGoldenTokens) {
  const auto g = golden();
  ASSERT_GE(g["cases"].size(), 4u);
  for (const auto& c : g["cases"]) {
    const auto want = c["completion_tokens"].get<std::vector<int>>();
    const Proc p = run({"-m", kModel, "-p", c["prompt"].get<std::string>(), "-n", std::to_string(want.size()), "--temp",
                        "0", "--fa", "tiled", "--json"});
    ASSERT_EQ(p.code, 0) << p.err;
    const auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["tokens"].get<std::vector<int>>(), want) << c["prompt"];
    EXPECT_EQ(j["attention"], "tiled");
  }
  const Proc bad = run({"-m", kModel, "-p", "x", "--fa", "fast"});
  EXPECT_FALSE(bad.signaled);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--fa"), std::string::npos) << bad.err;
}

TEST_F(RunCli, StreamedTextEqualsJsonText) {
  const auto c = golden()["cases"][2];
  const std::string prompt = c["prompt"].get<std::string>();
  const Proc s = run({"-m", kModel, "-p", prompt, "-n", "64", "--temp", "0"});
  ASSERT_EQ(s.code, 0) << s.err;
  const Proc j = run({"-m", kModel, "-p", prompt, "-n", "64", "--temp", "0", "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  const auto js = nlohmann::json::parse(j.out);
  EXPECT_EQ(s.out, js["text"].get<std::string>());
  EXPECT_EQ(s.out, c["completion_text"].get<std::string>());
  // The summary line: speeds, bandwidth against the peak, the logits hash (same both ways).
  for (const char* k : {"prompt", "decode", "tok/s", "GB/s", "peak", "logits hash"})
    EXPECT_NE(s.err.find(k), std::string::npos) << k << " in: " << s.err;
  EXPECT_NE(s.err.find(js["logits_hash"].get<std::string>()), std::string::npos);
}

TEST_F(RunCli, ThreadsDoNotChangeOutput) {
  const Proc a = run({"-m", kModel, "-p", "The little dog", "-n", "32", "--temp", "0", "-t", "1", "--json"});
  const Proc b = run({"-m", kModel, "-p", "The little dog", "-n", "32", "--temp", "0", "-t", "3", "--json"});
  ASSERT_EQ(a.code, 0);
  ASSERT_EQ(b.code, 0);
  EXPECT_EQ(nlohmann::json::parse(a.out)["logits_hash"], nlohmann::json::parse(b.out)["logits_hash"]);
}

TEST_F(RunCli, SeededSamplingIsReproducible) {
  auto tokens = [](const std::string& seed) {
    const Proc p = run({"-m", kModel, "-p", "Once upon a time", "-n", "40", "--temp", "1.0", "--top-k", "0",
                        "--top-p", "1", "--min-p", "0", "--seed", seed, "--json"});
    EXPECT_EQ(p.code, 0) << p.err;
    return nlohmann::json::parse(p.out)["tokens"];
  };
  EXPECT_EQ(tokens("42"), tokens("42"));
  EXPECT_NE(tokens("42"), tokens("43"));
}

TEST_F(RunCli, StopString) {
  const Proc p = run({"-m", kModel, "-p", "Once upon a time", "-n", "64", "--temp", "0", "--stop", "Lily", "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["text"], ", there was a little girl named ");
  EXPECT_EQ(j["stop_reason"], "stop");
  const Proc s = run({"-m", kModel, "-p", "Once upon a time", "-n", "64", "--temp", "0", "--stop", "Lily"});
  EXPECT_EQ(s.out, ", there was a little girl named ");
}

TEST_F(RunCli, ShortGeneration) {
  const Proc p = run({"-m", kModel, "-p", "Once upon a time", "-n", "3", "--temp", "0", "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(nlohmann::json::parse(p.out)["tokens"], (std::vector<int>{432, 383, 286}));
}

TEST_F(RunCli, ChatRendersWithTheTemplateItDetected) {
  // stories260K has no chat template and a plain llama vocabulary: the fallback is logged.
  const Proc p = run({"-m", kModel, "--chat", "--system", "Be brief.", "-p", "Tell a story", "-n", "4", "--temp",
                      "0", "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.err.find("chat template"), std::string::npos) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  const Proc plain = run({"-m", kModel, "-p", "Tell a story", "-n", "4", "--temp", "0", "--json"});
  ASSERT_EQ(plain.code, 0) << plain.err;
  // The rendered prompt wraps the message, so it is longer than the raw one.
  EXPECT_GT(j["prompt_tokens"].size(), nlohmann::json::parse(plain.out)["prompt_tokens"].size());
}

// --- bad input ---------------------------------------------------------------------------

void expect_clean_failure(const Proc& p, const std::string& needle) {
  EXPECT_FALSE(p.signaled) << "killed by signal " << p.code;
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find(needle), std::string::npos) << "stderr lacks '" << needle << "': " << p.err;
}

TEST_F(RunCli, MissingFile) {
  expect_clean_failure(run({"-m", kWork + "/no-such-model.gguf", "-p", "hi"}), "no-such-model.gguf");
}

TEST_F(RunCli, NotAGgufFile) {
  const std::string path = kWork + "/garbage.gguf";
  std::ofstream(path) << "definitely not a GGUF file, just some text of reasonable length\n";
  expect_clean_failure(run({"-m", path, "-p", "hi"}), "DataLoss");
  const std::string empty = kWork + "/empty.gguf";
  std::ofstream{empty};
  expect_clean_failure(run({"-m", empty, "-p", "hi"}), "error");
}

TEST_F(RunCli, TruncatedModel) {
  const std::string bytes = slurp(kModel);
  const std::string path = kWork + "/truncated.gguf";
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_clean_failure(run({"-m", path, "-p", "hi"}), "error");
}

TEST_F(RunCli, UnsupportedArchitecture) {
  gguf::Writer w;
  w.add_string("general.architecture", "foo");
  w.add_u32("foo.block_count", 1);
  w.add_tensor("token_embd.weight", DType::F32, {4, 2}, std::vector<uint8_t>(32, 0));
  const std::string path = kWork + "/foo.gguf";
  ASSERT_TRUE(w.write(path).is_ok());
  expect_clean_failure(run({"-m", path, "-p", "hi"}), "unsupported architecture 'foo'");
}

// A warm-up of many tokens (in several steps of -b, beyond the context: capped) leaves no
// trace in the result; fewer than one token is a usage error.
TEST_F(RunCli, LongWarmupLeavesTheOutputAsItWas) {
  const Proc a = run({"-m", kModel, "-p", "The little dog", "-n", "24", "--temp", "0", "--json"});
  ASSERT_EQ(a.code, 0) << a.err;
  for (const char* n : {"100", "100000"}) {
    const Proc b = run({"-m", kModel, "-p", "The little dog", "-n", "24", "--temp", "0", "--json", "-b", "16",
                        "--ctx", "256", "--warmup-tokens", n});
    ASSERT_EQ(b.code, 0) << b.err;
    const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
    EXPECT_EQ(ja["logits_hash"], jb["logits_hash"]) << n;
    EXPECT_EQ(ja["tokens"], jb["tokens"]) << n;
  }
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "--warmup-tokens", "0"}), "--warmup-tokens");
}

TEST_F(RunCli, NonPositiveTokenCount) {
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "-n", "0"}), "-n");
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "-n", "-5"}), "-n");
}

TEST_F(RunCli, PromptLongerThanContext) {
  expect_clean_failure(run({"-m", kModel, "-p", "Once upon a time there was a little girl named Lily", "--ctx", "8"}),
                       "context");
}

TEST_F(RunCli, BadSamplingFlags) {
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "--temp", "-1"}), "temperature");
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "--temp", "abc"}), "temp");
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "--top-p", "2"}), "top_p");
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "-t", "-2"}), "-t");
  // 100000 workers on a few cores ran for minutes instead of failing.
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "-t", "100000"}), "--threads");
}

TEST_F(RunCli, BadChatFlags) {
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "--system", "x"}), "--chat");
  expect_clean_failure(run({"-m", kModel, "-p", "hi", "--chat", "--chat-template", "nonsense"}), "nonsense");
  expect_clean_failure(run({"-m", kModel, "-p", ""}), "empty");
}

TEST_F(RunCli, MissingRequiredFlags) {
  setenv("TIERSERVE_MODEL", (kWork + "/no-default-model.gguf").c_str(), 1);  // inherited by the child
  expect_clean_failure(run({"-p", "hi"}), "setup-model.sh");
  unsetenv("TIERSERVE_MODEL");
  expect_clean_failure(run({"-m", kModel}), "prompt");
}

}  // namespace
}  // namespace ts
