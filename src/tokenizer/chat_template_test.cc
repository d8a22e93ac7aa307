// Chat templates: detection of the real templates in ../shared/testdata/chat_templates/,
// golden renders per family, the error rules, the fallbacks, and the real Gemma 3
// vocabulary (when the default model is installed).
//
// The golden strings were produced once by rendering the .jinja files with Python's jinja2
// (trim_blocks and lstrip_blocks on, as transformers does) and dropping the BOS text; the
// test itself needs no Python. Where we differ from a template on purpose (Gemma 2 with a
// system message) the expected string is written by hand and says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace ts::tok {
namespace {

const std::string kTemplateDir = std::string(TS_SHARED_DIR) + "/testdata/chat_templates/";
const char* const kGemmaModel = "/root/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf";

std::string read_template(const std::string& name) {
  std::ifstream in(kTemplateDir + name + ".jinja", std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing " << kTemplateDir << name << ".jinja";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One conversation of the golden table.
struct Conversation {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;
};

const std::map<std::string, Conversation>& conversations() {
  static const std::map<std::string, Conversation> kConvs = {
      {"single", {{{"user", "Hello!"}}, true, {}}},
      {"single_nogen", {{{"user", "Hello!"}}, false, {}}},
      {"multi",
       {{{"system", "You are terse."}, {"user", "  What is 2+2?\n"}, {"assistant", " 4 "}, {"user", "And 3+3?"}},
        true, {}}},
      {"multi_nogen", {{{"user", "Hi"}, {"assistant", "Hello."}}, false, {}}},
      {"sys_last_asst", {{{"system", "Be nice."}, {"user", "Hi"}, {"assistant", "Hello."}}, false, {}}},
      {"think_hist",
       {{{"user", "Hi"}, {"assistant", "<think>\nThe user greets.\n</think>\n\nHello!"}, {"user", "Bye"}}, true, {}}},
      {"think_last", {{{"user", "Hi"}, {"assistant", "<think>\nhm\n</think>\n\nHello!"}}, false, {}}},
      {"plain_last", {{{"user", "Hi"}, {"assistant", "Hello!"}}, false, {}}},
      {"nothink", {{{"user", "Hi"}}, true, false}},
      {"bad_alt", {{{"user", "a"}, {"user", "b"}}, true, {}}},
      {"empty_sys", {{{"system", ""}, {"user", "Hi"}}, true, {}}},
  };
  return kConvs;
}

struct Golden {
  const char* file;
  const char* conversation;
  const char* expected;
};

// jinja2 output minus the BOS text.
const Golden kGolden[] = {
    {"Qwen-Qwen2.5-7B-Instruct", "single",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "single_nogen",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "multi",
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n  What is 2+2?\n<|im_end|>\n<|im_start|>assistant\n 4 <|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "multi_nogen",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "sys_last_asst",
     "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "think_hist",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nThe user greets.\n</think>\n\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "think_last",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nhm\n</think>\n\nHello!<|im_end|>\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "plain_last",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "nothink",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "bad_alt",
     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen2.5-7B-Instruct", "empty_sys",
     "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen3-0.6B", "single",
     "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen3-0.6B", "single_nogen",
     "<|im_start|>user\nHello!<|im_end|>\n"},
    {"Qwen-Qwen3-0.6B", "multi",
     "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n  What is 2+2?\n<|im_end|>\n<|im_start|>assistant\n 4 <|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen3-0.6B", "multi_nogen",
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>\n"},
    {"Qwen-Qwen3-0.6B", "sys_last_asst",
     "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello.<|im_end|>\n"},
    {"Qwen-Qwen3-0.6B", "think_hist",
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen3-0.6B", "think_last",
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nhm\n</think>\n\nHello!<|im_end|>\n"},
    {"Qwen-Qwen3-0.6B", "plain_last",
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n"},
    {"Qwen-Qwen3-0.6B", "nothink",
     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
    {"Qwen-Qwen3-0.6B", "bad_alt",
     "<|im_start|>user\na<|im_end|>\n<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n"},
    {"Qwen-Qwen3-0.6B", "empty_sys",
     "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
    {"google-gemma-2-2b-it", "single",
     "<start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\n"},
    {"google-gemma-2-2b-it", "single_nogen",
     "<start_of_turn>user\nHello!<end_of_turn>\n"},
    {"google-gemma-2-2b-it", "multi_nogen",
     "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"},
    {"google-gemma-2-2b-it", "think_hist",
     "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n<think>\nThe user greets.\n</think>\n\nHello!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"},
    {"google-gemma-2-2b-it", "think_last",
     "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n<think>\nhm\n</think>\n\nHello!<end_of_turn>\n"},
    {"google-gemma-2-2b-it", "plain_last",
     "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"},
    {"google-gemma-2-2b-it", "nothink",
     "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"},
    {"meta-llama-Llama-3.1-8B-Instruct", "single",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"meta-llama-Llama-3.1-8B-Instruct", "single_nogen",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"},
    {"meta-llama-Llama-3.1-8B-Instruct", "multi",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are terse.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"meta-llama-Llama-3.1-8B-Instruct", "multi_nogen",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"},
    {"meta-llama-Llama-3.1-8B-Instruct", "sys_last_asst",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe nice.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"},
    {"meta-llama-Llama-3.1-8B-Instruct", "think_hist",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<think>\nThe user greets.\n</think>\n\nHello!<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"meta-llama-Llama-3.1-8B-Instruct", "think_last",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<think>\nhm\n</think>\n\nHello!<|eot_id|>"},
    {"meta-llama-Llama-3.1-8B-Instruct", "plain_last",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"},
    {"meta-llama-Llama-3.1-8B-Instruct", "nothink",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"meta-llama-Llama-3.1-8B-Instruct", "bad_alt",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\na<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nb<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"meta-llama-Llama-3.1-8B-Instruct", "empty_sys",
     "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"microsoft-Phi-3.5-mini-instruct", "single",
     "<|user|>\nHello!<|end|>\n<|assistant|>\n"},
    {"microsoft-Phi-3.5-mini-instruct", "single_nogen",
     "<|user|>\nHello!<|end|>\n<|endoftext|>"},
    {"microsoft-Phi-3.5-mini-instruct", "multi",
     "<|system|>\nYou are terse.<|end|>\n<|user|>\n  What is 2+2?\n<|end|>\n<|assistant|>\n 4 <|end|>\n<|user|>\nAnd 3+3?<|end|>\n<|assistant|>\n"},
    {"microsoft-Phi-3.5-mini-instruct", "multi_nogen",
     "<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|endoftext|>"},
    {"microsoft-Phi-3.5-mini-instruct", "sys_last_asst",
     "<|system|>\nBe nice.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello.<|end|>\n<|endoftext|>"},
    {"microsoft-Phi-3.5-mini-instruct", "think_hist",
     "<|user|>\nHi<|end|>\n<|assistant|>\n<think>\nThe user greets.\n</think>\n\nHello!<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n"},
    {"microsoft-Phi-3.5-mini-instruct", "think_last",
     "<|user|>\nHi<|end|>\n<|assistant|>\n<think>\nhm\n</think>\n\nHello!<|end|>\n<|endoftext|>"},
    {"microsoft-Phi-3.5-mini-instruct", "plain_last",
     "<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|endoftext|>"},
    {"microsoft-Phi-3.5-mini-instruct", "nothink",
     "<|user|>\nHi<|end|>\n<|assistant|>\n"},
    {"microsoft-Phi-3.5-mini-instruct", "bad_alt",
     "<|user|>\na<|end|>\n<|user|>\nb<|end|>\n<|assistant|>\n"},
    {"microsoft-Phi-3.5-mini-instruct", "empty_sys",
     "<|user|>\nHi<|end|>\n<|assistant|>\n"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "single",
     "[INST]Hello![/INST]"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "single_nogen",
     "[INST]Hello![/INST]"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "multi",
     "[INST]  What is 2+2?\n[/INST] 4 </s>[INST]You are terse.\n\nAnd 3+3?[/INST]"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "multi_nogen",
     "[INST]Hi[/INST]Hello.</s>"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "sys_last_asst",
     "[INST]Hi[/INST]Hello.</s>"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "think_hist",
     "[INST]Hi[/INST]<think>\nThe user greets.\n</think>\n\nHello!</s>[INST]Bye[/INST]"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "think_last",
     "[INST]Hi[/INST]<think>\nhm\n</think>\n\nHello!</s>"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "plain_last",
     "[INST]Hi[/INST]Hello!</s>"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "nothink",
     "[INST]Hi[/INST]"},
    {"mistralai-Mistral-Nemo-Instruct-2407", "empty_sys",
     "[INST]\n\nHi[/INST]"},
    // Deliberate difference: Gemma 2's template raises "System role not supported"; we
    // follow Gemma 3's template, which puts the system text (+ "\n\n") in front of the
    // first user turn.
    {"google-gemma-2-2b-it", "multi",
     "<start_of_turn>user\nYou are terse.\n\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n"
     "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n"},
    {"google-gemma-2-2b-it", "sys_last_asst",
     "<start_of_turn>user\nBe nice.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"},
    {"google-gemma-2-2b-it", "empty_sys", "<start_of_turn>user\n\n\nHi<end_of_turn>\n<start_of_turn>model\n"},
};

struct Expected {
  const char* file;
  ChatFamily family;
  bool adds_bos;
};
const Expected kDetect[] = {
    {"google-gemma-2-2b-it", ChatFamily::kGemma, true},
    {"meta-llama-Llama-3.1-8B-Instruct", ChatFamily::kLlama3, true},
    {"Qwen-Qwen2.5-7B-Instruct", ChatFamily::kChatml, false},
    {"Qwen-Qwen3-0.6B", ChatFamily::kQwen3, false},
    {"mistralai-Mistral-Nemo-Instruct-2407", ChatFamily::kMistralTekken, true},
    {"microsoft-Phi-3.5-mini-instruct", ChatFamily::kPhi3, false},
};

TEST(ChatTemplate, DetectsEveryTestdataTemplate) {
  size_t n_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(kTemplateDir)) n_files += e.path().extension() == ".jinja";
  EXPECT_EQ(n_files, std::size(kDetect)) << "a template in " << kTemplateDir << " has no expectation here";
  for (const Expected& e : kDetect) {
    const ChatTemplate t = ChatTemplate::from_text(read_template(e.file), "");
    EXPECT_EQ(t.family(), e.family) << e.file << ": " << t.reason();
    EXPECT_EQ(t.source(), ChatSource::kTemplate) << e.file;
    EXPECT_EQ(t.template_adds_bos(), e.adds_bos) << e.file;
    EXPECT_NE(t.reason().find("tokenizer.chat_template contains"), std::string::npos) << t.reason();
    EXPECT_FALSE(t.stop_texts().empty());
  }
}

TEST(ChatTemplate, RendersGoldenStrings) {
  for (const Golden& g : kGolden) {
    const ChatTemplate t = ChatTemplate::from_text(read_template(g.file), "");
    const Conversation& c = conversations().at(g.conversation);
    ChatRenderOptions opt;
    opt.add_generation_prompt = c.add_generation_prompt;
    opt.enable_thinking = c.enable_thinking;
    const Result<std::string> r = t.render(c.messages, opt);
    ASSERT_TRUE(r.is_ok()) << g.file << " / " << g.conversation << ": " << r.status().to_string();
    EXPECT_EQ(*r, g.expected) << g.file << " / " << g.conversation;
  }
}

TEST(ChatTemplate, StopTexts) {
  const auto stops = [](const char* file) { return ChatTemplate::from_text(read_template(file), "").stop_texts(); };
  EXPECT_EQ(stops("google-gemma-2-2b-it").front(), "<end_of_turn>");
  EXPECT_EQ(stops("meta-llama-Llama-3.1-8B-Instruct").front(), "<|eot_id|>");
  EXPECT_EQ(stops("Qwen-Qwen2.5-7B-Instruct").front(), "<|im_end|>");
  EXPECT_EQ(stops("Qwen-Qwen3-0.6B").front(), "<|im_end|>");
  EXPECT_EQ(stops("mistralai-Mistral-Nemo-Instruct-2407").front(), "</s>");
  EXPECT_EQ(stops("microsoft-Phi-3.5-mini-instruct").front(), "<|end|>");
}

// --- errors --------------------------------------------------------------------------

Status render_status(const ChatTemplate& t, std::vector<ChatMessage> msgs) {
  return t.render(msgs, true).status();
}

TEST(ChatTemplate, RejectsUnknownRolesAndEmptyLists) {
  for (const Expected& e : kDetect) {
    const ChatTemplate t = ChatTemplate::from_text(read_template(e.file), "");
    Status s = render_status(t, {{"user", "hi"}, {"foo", "x"}});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << e.file;
    EXPECT_NE(s.message().find("unknown role 'foo'"), std::string::npos) << s.message();
    EXPECT_EQ(render_status(t, {{"tool", "{}"}}).code(), StatusCode::kInvalidArgument) << e.file;
    s = render_status(t, {});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << e.file;
  }
}

TEST(ChatTemplate, EnforcesAlternationWhereTheTemplateDoes) {
  for (const char* file : {"google-gemma-2-2b-it", "mistralai-Mistral-Nemo-Instruct-2407"}) {
    const ChatTemplate t = ChatTemplate::from_text(read_template(file), "");
    Status s = render_status(t, {{"user", "a"}, {"user", "b"}});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << file;
    EXPECT_NE(s.message().find("alternate"), std::string::npos) << s.message();
    EXPECT_EQ(render_status(t, {{"assistant", "a"}}).code(), StatusCode::kInvalidArgument) << file;
    EXPECT_EQ(render_status(t, {{"system", "s"}, {"assistant", "a"}}).code(), StatusCode::kInvalidArgument) << file;
    // A system message only first, and not alone.
    s = render_status(t, {{"user", "a"}, {"system", "s"}});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << file;
    EXPECT_NE(s.message().find("only supported as the first"), std::string::npos) << s.message();
    EXPECT_EQ(render_status(t, {{"system", "s"}}).code(), StatusCode::kInvalidArgument) << file;
    EXPECT_TRUE(render_status(t, {{"system", "s"}, {"user", "a"}, {"assistant", "b"}, {"user", "c"}}).is_ok());
  }
  // ChatML, Llama 3 and Phi-3 templates do not check the order (see the bad_alt goldens).
}

// --- variants read from the template text ----------------------------------------------
// Short templates written for these tests, each with the markers and literals of one
// variant; their expected strings were checked with jinja2.

TEST(ChatTemplate, Llama30WithoutPreamble) {
  const ChatTemplate t = ChatTemplate::from_text(
      "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
      "message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
      "llama");
  ASSERT_EQ(t.family(), ChatFamily::kLlama3);
  const std::vector<ChatMessage> msgs = {{"system", "You are terse."}, {"user", "  What is 2+2?\n"}};
  EXPECT_EQ(*t.render(msgs, true),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(*t.render(std::vector<ChatMessage>{{"user", "x"}}, false), "<|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

TEST(ChatTemplate, Llama3DateFromTemplate) {
  const ChatTemplate t = ChatTemplate::from_text(
      "{{- bos_token }}{%- if not date_string is defined %}{%- set date_string = \"01 Jan 2025\" %}{%- endif %}"
      "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}{{- \"Cutting Knowledge Date: March 2024\\n\" }}",
      "");
  ASSERT_EQ(t.family(), ChatFamily::kLlama3);
  EXPECT_EQ(*t.render(std::vector<ChatMessage>{{"user", "x"}}, false),
            "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: March 2024\nToday Date: 01 Jan 2025"
            "\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

TEST(ChatTemplate, ChatmlDefaultSystemPrompt) {
  const ChatTemplate qwen2 = ChatTemplate::from_text(
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
      "qwen2");
  ASSERT_EQ(qwen2.family(), ChatFamily::kChatml);
  EXPECT_EQ(*qwen2.render(std::vector<ChatMessage>{{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*qwen2.render(std::vector<ChatMessage>{{"system", "S"}, {"user", "Hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  // A plain ChatML template has no default system prompt.
  const ChatTemplate plain = ChatTemplate::from_text(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}",
      "");
  EXPECT_EQ(*plain.render(std::vector<ChatMessage>{{"user", "Hi"}}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, QwenThinkingPromptVariants) {
  const ChatTemplate qwen3 = ChatTemplate::from_text(read_template("Qwen-Qwen3-0.6B"), "");
  ChatRenderOptions opt;
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  EXPECT_EQ(*qwen3.render(msgs, opt), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  opt.enable_thinking = true;
  EXPECT_EQ(*qwen3.render(msgs, opt), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  opt.enable_thinking = false;
  EXPECT_EQ(*qwen3.render(msgs, opt), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Thinking-only models (QwQ style) open the think block in the prompt themselves.
  const ChatTemplate qwq = ChatTemplate::from_text(
      "{%- if '</think>' in content %}{% endif %}{{- '<|im_start|>assistant\\n<think>\\n' }}", "");
  ASSERT_EQ(qwq.family(), ChatFamily::kQwen3);
  EXPECT_EQ(*qwq.render(msgs, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  // enable_thinking means nothing to other families.
  const ChatTemplate qwen25 = ChatTemplate::from_text(read_template("Qwen-Qwen2.5-7B-Instruct"), "");
  EXPECT_EQ(qwen25.render(msgs, opt)->find("<think>"), std::string::npos);
}

const std::vector<ChatMessage> kMulti = {
    {"system", "You are terse."}, {"user", "  What is 2+2?\n"}, {"assistant", " 4 "}, {"user", "And 3+3?"}};

TEST(ChatTemplate, MistralV1SpacingAndNoSystemRole) {
  const ChatTemplate t = ChatTemplate::from_text(
      "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('roles must alternate') }}{% endif %}{% if message['role'] == 'user' %}"
      "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
      "{{ message['content'] + eos_token }}{% else %}{{ raise_exception('Only user and assistant roles are "
      "supported!') }}{% endif %}{% endfor %}",
      "llama");
  ASSERT_EQ(t.family(), ChatFamily::kMistral);
  EXPECT_TRUE(t.template_adds_bos());
  EXPECT_EQ(*t.render(std::span(kMulti).subspan(1), true), "[INST]   What is 2+2?\n [/INST] 4 </s>[INST] And 3+3? [/INST]");
  const Status s = t.render(kMulti, true).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no system role"), std::string::npos) << s.message();
}

TEST(ChatTemplate, MistralV7SystemPromptBlocks) {
  const ChatTemplate t = ChatTemplate::from_text(
      "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
      "{{ '[INST]' + message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}"
      "{{ '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}"
      "{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
      "");
  ASSERT_EQ(t.family(), ChatFamily::kMistralV7);
  EXPECT_EQ(*t.render(kMulti, true),
            "[SYSTEM_PROMPT]You are terse.[/SYSTEM_PROMPT][INST]  What is 2+2?\n[/INST] 4 </s>[INST]And 3+3?[/INST]");
}

TEST(ChatTemplate, GemmaSystemSeparatorFromTemplate) {
  // Gemma 3's own template; some derived templates use a single newline.
  const ChatTemplate t = ChatTemplate::from_text(
      "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first_user_prefix = "
      "messages[0]['content'] + '\\n' -%}{%- endif -%}{{ '<start_of_turn>' + role + '\\n' }}",
      "");
  ASSERT_EQ(t.family(), ChatFamily::kGemma);
  EXPECT_EQ(*t.render(std::vector<ChatMessage>{{"system", "S"}, {"user", "U"}}, true),
            "<start_of_turn>user\nS\nU<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatTemplate, TrimsAsPythonDoes) {
  const ChatTemplate gemma = ChatTemplate::from_text(read_template("google-gemma-2-2b-it"), "");
  // U+00A0 and U+3000 are whitespace to str.strip(); "é" is not; invalid UTF-8 stays.
  EXPECT_EQ(*gemma.render(std::vector<ChatMessage>{{"user", "\xC2\xA0\t x \xE3\x80\x80\n"}}, false),
            "<start_of_turn>user\nx<end_of_turn>\n");
  EXPECT_EQ(*gemma.render(std::vector<ChatMessage>{{"user", " \xC3\xA9 "}}, false),
            "<start_of_turn>user\n\xC3\xA9<end_of_turn>\n");
  EXPECT_EQ(*gemma.render(std::vector<ChatMessage>{{"user", " \xFF\xC2 "}}, false),
            "<start_of_turn>user\n\xFF\xC2<end_of_turn>\n");
  EXPECT_EQ(*gemma.render(std::vector<ChatMessage>{{"user", "   "}}, false), "<start_of_turn>user\n<end_of_turn>\n");
}

// --- fallbacks -------------------------------------------------------------------------

TEST(ChatTemplate, UnknownTemplateFallsBackWithAReason) {
  const ChatTemplate t = ChatTemplate::from_text("{{ messages[0]['content'] }}### Response:", "gptneox");
  EXPECT_EQ(t.family(), ChatFamily::kDefault);
  EXPECT_EQ(t.source(), ChatSource::kFallback);
  EXPECT_NE(t.reason().find("not recognised"), std::string::npos) << t.reason();
  EXPECT_NE(t.reason().find("'gptneox'"), std::string::npos) << t.reason();
  EXPECT_NE(t.reason().find("default"), std::string::npos) << t.reason();
  // The default renders ChatML without a system prompt of its own.
  EXPECT_EQ(*t.render(std::vector<ChatMessage>{{"system", "S"}, {"user", "U"}}, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.stop_texts().front(), "<|im_end|>");

  for (const char* unsupported : {"[INST] <<SYS>>\\n{{ system }}<</SYS>>", "<|im_start|>system<|im_sep|>"}) {
    const ChatTemplate u = ChatTemplate::from_text(unsupported, "");
    EXPECT_EQ(u.family(), ChatFamily::kDefault) << unsupported;
    EXPECT_NE(u.reason().find("not supported"), std::string::npos) << u.reason();
  }
}

TEST(ChatTemplate, InfersFromArchitecture) {
  struct Case {
    const char* arch;
    ChatFamily family;
  };
  for (const Case& c : {Case{"gemma3", ChatFamily::kGemma}, Case{"gemma2", ChatFamily::kGemma},
                        Case{"qwen2", ChatFamily::kChatml}, Case{"qwen3", ChatFamily::kQwen3},
                        Case{"phi3", ChatFamily::kPhi3}, Case{"llama", ChatFamily::kDefault},
                        Case{"", ChatFamily::kDefault}}) {
    const ChatTemplate t = ChatTemplate::from_text("", c.arch);
    EXPECT_EQ(t.family(), c.family) << c.arch << ": " << t.reason();
    EXPECT_NE(t.reason().find("no tokenizer.chat_template"), std::string::npos) << t.reason();
    EXPECT_EQ(t.source(), c.family == ChatFamily::kDefault ? ChatSource::kFallback : ChatSource::kArchitecture);
  }
  // An unrecognised template on a known architecture.
  const ChatTemplate t = ChatTemplate::from_text("{{ messages }}", "gemma3");
  EXPECT_EQ(t.family(), ChatFamily::kGemma);
  EXPECT_NE(t.reason().find("not recognised"), std::string::npos) << t.reason();
}

TEST(ChatTemplate, FromName) {
  const Result<ChatTemplate> g = ChatTemplate::from_name("gemma");
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->family(), ChatFamily::kGemma);
  EXPECT_EQ(g->source(), ChatSource::kOverride);
  for (ChatFamily f : {ChatFamily::kLlama3, ChatFamily::kChatml, ChatFamily::kQwen3, ChatFamily::kMistral,
                       ChatFamily::kMistralTekken, ChatFamily::kMistralV7, ChatFamily::kPhi3, ChatFamily::kDefault}) {
    const Result<ChatTemplate> t = ChatTemplate::from_name(chat_family_name(f));
    ASSERT_TRUE(t.is_ok()) << chat_family_name(f);
    EXPECT_EQ(t->family(), f);
    EXPECT_TRUE(t->render(std::vector<ChatMessage>{{"user", "x"}}, true).is_ok());
  }
  EXPECT_EQ(ChatTemplate::from_name("jinja").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*ChatTemplate::from_name("mistral")->render(std::vector<ChatMessage>{{"system", "S"}, {"user", "U"}}, true),
            "[INST] S\n\nU[/INST]");
}

// Templates and contents are untrusted: pieces of markers and literals glued at random
// must give a family and either a render or a typed error, never a crash.
TEST(ChatTemplate, RandomInputsNeverCrash) {
  const char* const kPieces[] = {"<start_of_turn>", "<|start_header_id|>", "<|im_start|>", "[INST]", "[INST] ",
                                 " [/INST]", "<|user|>", "<|assistant|>", "<|end|>", "</think>", "<think>",
                                 "system", "\\n", "\n", "'", "\"", "\\", "date_string = ", "<|im_end|>",
                                 "Cutting Knowledge Date: ", "first_user_prefix = messages[0]['content'] +",
                                 "[SYSTEM_PROMPT]", "<<SYS>>", " ", "\xE3\x80", "\x80", "x"};
  const char* const kRoles[] = {"system", "user", "assistant"};
  std::mt19937 rng(1234);
  const auto pick = [&](size_t n) { return size_t(rng() % n); };
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text;
    for (size_t i = 0, n = pick(12); i < n; ++i) text += kPieces[pick(std::size(kPieces))];
    const ChatTemplate t = ChatTemplate::from_text(text, iter % 2 ? "llama" : "gemma3");
    std::vector<ChatMessage> msgs;
    for (size_t i = 0, n = pick(5); i < n; ++i) {
      std::string content;
      for (size_t k = 0, m = pick(4); k < m; ++k) content += kPieces[pick(std::size(kPieces))];
      msgs.push_back({kRoles[pick(3)], content});
    }
    ChatRenderOptions opt;
    opt.add_generation_prompt = iter % 3 != 0;
    if (iter % 5 == 0) opt.enable_thinking = false;
    const Result<std::string> r = t.render(msgs, opt);
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
    }
  }
}

// --- detect() on GGUF files --------------------------------------------------------------

struct Parsed {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::File> file;
};
Parsed parse(const gguf::Writer& w) {
  Parsed p;
  p.bytes = w.to_bytes();
  auto f = gguf::File::parse(p.bytes);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (f.is_ok()) p.file = std::move(*f);
  return p;
}

TEST(ChatTemplateDetect, LlamaWithHeaderTokenIsLlama3) {
  gguf::Writer w;
  w.add_string("general.architecture", "llama");
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<|begin_of_text|>", "<|start_header_id|>", "a"});
  Parsed p = parse(w);
  ASSERT_TRUE(p.file);
  const Result<ChatTemplate> t = ChatTemplate::detect(*p.file);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->family(), ChatFamily::kLlama3);
  EXPECT_EQ(t->source(), ChatSource::kArchitecture);
  EXPECT_NE(t->reason().find("<|start_header_id|> token"), std::string::npos) << t->reason();

  gguf::Writer w2;
  w2.add_string("general.architecture", "llama");
  w2.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
  Parsed p2 = parse(w2);
  ASSERT_TRUE(p2.file);
  EXPECT_EQ(ChatTemplate::detect(*p2.file)->family(), ChatFamily::kDefault);
}

TEST(ChatTemplateDetect, TemplateWinsAndEosTextComesFromTheVocabulary) {
  gguf::Writer w;
  w.add_string("general.architecture", "phi3");
  w.add_string("tokenizer.chat_template", read_template("microsoft-Phi-3.5-mini-instruct"));
  w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "<|my_eos|>"});
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  Parsed p = parse(w);
  ASSERT_TRUE(p.file);
  const Result<ChatTemplate> t = ChatTemplate::detect(*p.file);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->family(), ChatFamily::kPhi3);
  EXPECT_EQ(t->source(), ChatSource::kTemplate);
  EXPECT_EQ(*t->render(std::vector<ChatMessage>{{"user", "x"}}, false), "<|user|>\nx<|end|>\n<|my_eos|>");
}

TEST(ChatTemplateDetect, WrongTypesAreDataLoss) {
  gguf::Writer w;
  w.add_u32("tokenizer.chat_template", 7);
  Parsed p = parse(w);
  ASSERT_TRUE(p.file);
  EXPECT_EQ(ChatTemplate::detect(*p.file).status().code(), StatusCode::kDataLoss);

  gguf::Writer w2;
  w2.add_string("general.architecture", "llama");
  w2.add_i32_array("tokenizer.ggml.tokens", {1, 2});
  Parsed p2 = parse(w2);
  ASSERT_TRUE(p2.file);
  EXPECT_EQ(ChatTemplate::detect(*p2.file).status().code(), StatusCode::kDataLoss);
}

// --- the real default model --------------------------------------------------------------

TEST(ChatTemplateGemma3Vocab, RendersAndEncodesWithSingleSpecialTokens) {
  if (!std::filesystem::exists(kGemmaModel)) {
    GTEST_SKIP() << kGemmaModel << " is not installed (the set-up script installs it)";
  }
  auto f = gguf::File::open(kGemmaModel);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  const Result<ChatTemplate> ct = ChatTemplate::detect(**f);
  ASSERT_TRUE(ct.is_ok()) << ct.status().to_string();
  EXPECT_EQ(ct->family(), ChatFamily::kGemma);
  EXPECT_EQ(ct->source(), ChatSource::kArchitecture) << ct->reason();
  std::printf("gemma-3-270m chat template: %s (%s)\n", std::string(chat_family_name(ct->family())).c_str(),
              ct->reason().c_str());

  const auto t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::from_gguf(**f);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const Tokenizer& t = **tok;
  std::printf("gemma-3-270m vocabulary: %d tokens loaded in %.1f ms\n", t.n_vocab(), load_ms);
  EXPECT_EQ(t.n_vocab(), 262144);

  const std::optional<TokenId> sot = t.find_token("<start_of_turn>");
  const std::optional<TokenId> eot = t.find_token("<end_of_turn>");
  ASSERT_TRUE(sot && eot);
  EXPECT_TRUE(t.is_eog(*eot));
  EXPECT_FALSE(t.is_eog(*sot));
  for (const std::string& s : ct->stop_texts()) {
    const std::optional<TokenId> id = t.find_token(s);
    ASSERT_TRUE(id) << s;
    EXPECT_TRUE(t.is_eog(*id)) << s;
  }

  const std::vector<ChatMessage> msgs = {{"system", "Answer briefly."},
                                         {"user", "What is the capital of France?"},
                                         {"assistant", "Paris."},
                                         {"user", "And of Italy?"}};
  const Result<std::string> text = ct->render(msgs, true);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  const std::vector<TokenId> ids = t.encode(*text, /*add_special=*/true, /*parse_special=*/true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), t.bos_id());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), t.bos_id()), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *sot), 4);  // 3 turns + the generation prompt
  EXPECT_EQ(std::count(ids.begin(), ids.end(), *eot), 3);
  // The rendered text comes back from the ids (special tokens rendered, BOS aside).
  EXPECT_EQ(t.decode(std::span(ids).subspan(1), /*render_special=*/true), *text);
  // Without parse_special the markers would be plain text: many more tokens, no <start_of_turn>.
  const std::vector<TokenId> plain = t.encode(*text, true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), *sot), 0);

  const std::vector<TokenId> hw = t.encode("Hello world", false, false);
  EXPECT_EQ(t.decode(hw), "Hello world");
  EXPECT_LE(hw.size(), 3u);
}

}  // namespace
}  // namespace ts::tok
