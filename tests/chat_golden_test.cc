// The default chat model's prompts are llama.cpp's, token for token: for every conversation
// of tests/data/golden/smollm2/chat.json (scripts/oracle/gen_chat_golden.py: llama-server
// rendering SmolLM2 135M Instruct's own Jinja template, its default system prompt
// included, and tokenizing the result), tierserve's chat template renders the same text and
// its tokenizer the same ids. And the model answers the README's question sensibly with a
// plain system prompt (the template's default one makes this small model miss it, as in
// llama.cpp: the reason for model.system_prompt).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "testing/process.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace ts {
namespace {

using json = nlohmann::json;

std::string smollm2_path() {
  if (const char* e = std::getenv("TIERSERVE_CHAT_MODEL"); e && *e) return e;
  std::string dir;
  if (const char* e = std::getenv("TIERSERVE_MODEL_DIR"); e && *e) dir = e;
  else dir = std::string(std::getenv("HOME") ? std::getenv("HOME") : ".") + "/.cache/tierserve/models";
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

bool need_model(const std::string& path) {
  if (std::ifstream(path)) return true;
  const char* req = std::getenv("TIERSERVE_REQUIRE_DEFAULT_MODEL");
  if (req && std::string(req) == "1") ADD_FAILURE() << path << " is not installed: run scripts/setup-model.sh";
  return false;
}

TEST(ChatGolden, SmolLM2PromptsAreLlamaCppsTokenForToken) {
  const std::string path = smollm2_path();
  if (!need_model(path)) GTEST_SKIP() << path << " is not installed (scripts/setup-model.sh)";
  const json golden = json::parse(testing_proc::slurp(std::string(TS_SOURCE_DIR) + "/tests/data/golden/smollm2/chat.json"));
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto tok = tok::Tokenizer::from_gguf(**f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  auto tmpl = tok::ChatTemplate::detect(**f);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  EXPECT_EQ(tok::chat_family_name(tmpl->family()), "chatml") << tmpl->reason();
  ASSERT_GE(golden["cases"].size(), 6u);
  for (const auto& c : golden["cases"]) {
    std::vector<tok::ChatMessage> msgs;
    for (const auto& m : c["messages"]) msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    auto text = tmpl->render(msgs, /*add_generation_prompt=*/true);
    ASSERT_TRUE(text.is_ok()) << c["name"] << ": " << text.status().to_string();
    EXPECT_EQ(*text, c["prompt"].get<std::string>()) << c["name"];
    const std::vector<int32_t> ids = (*tok)->encode(*text, /*add_special=*/true, /*parse_special=*/true);
    EXPECT_EQ(json(ids), c["tokens"]) << c["name"];
  }
}

TEST(ChatGolden, TheChatModelAnswersTheReadmeQuestion) {
  const std::string path = smollm2_path();
  if (!need_model(path)) GTEST_SKIP() << path << " is not installed (scripts/setup-model.sh)";
  const std::string out = std::string(TS_BINARY_DIR) + "/chat_golden_run.txt";
  // No -m: `run --chat` takes the installed chat model.
  const std::string cmd = std::string(TS_TIERSERVE_BIN) +
                          " run --chat --system 'You are a helpful assistant.' -p 'What is the capital of France?' -n 24 --temp 0 "
                          "-t 2 --json > '" + out + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const json r = json::parse(testing_proc::slurp(out), nullptr, false);
  ASSERT_TRUE(r.is_object()) << testing_proc::slurp(out);
  EXPECT_EQ(r["model"], path);
  EXPECT_NE(r["text"].get<std::string>().find("Paris"), std::string::npos) << r["text"];
}

}  // namespace
}  // namespace ts
