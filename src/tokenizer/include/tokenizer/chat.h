// Chat templates: turning a list of {role, content} messages into the prompt text a chat
// model was trained on.
//
// A GGUF stores its template as Jinja source (tokenizer.chat_template). We never execute
// it. Instead detect() recognises the template's family by distinctive markers in its text
// and renders that family with our own code; a few details that vary inside a family are
// read from the template's string literals (Qwen2's default system prompt, Llama 3.1's
// "Cutting Knowledge Date" preamble, Mistral's spacing around [INST]). The rules, in order:
//
//   "<start_of_turn>"                          -> kGemma
//   "<|start_header_id|>"                      -> kLlama3
//   "<|im_start|>" with "</think>"             -> kQwen3   ("<|im_sep|>": Phi-4, unknown)
//   "<|im_start|>"                             -> kChatml
//   "[INST]" with "[SYSTEM_PROMPT]"            -> kMistralV7 ("<<SYS>>": Llama 2, unknown)
//   "[INST]" written as a bare '[INST]' literal -> kMistralTekken (Mistral-Nemo)
//   "[INST]"                                   -> kMistral ('[INST] ' with a space: v1/v3)
//   "<|user|>" + "<|assistant|>" + "<|end|>"   -> kPhi3
//
// With no template, or one no rule matches, the family is inferred from
// general.architecture (gemma* -> gemma, qwen2* -> chatml, qwen3* -> qwen3, phi3 -> phi3,
// llama with a "<|start_header_id|>" token in the vocabulary -> llama3); failing that it is
// kDefault, which renders ChatML (what llama.cpp also assumes for a model without a
// template). reason() says which rule decided, for the CLI to log.
//
// BOS: the Gemma, Llama 3 and Mistral templates start with {{ bos_token }}. render() never
// writes the BOS text; encode the result with Tokenizer::encode(text, /*add_special=*/true,
// /*parse_special=*/true), which adds BOS exactly once when the vocabulary asks for it
// (tokenizer.ggml.add_bos_token). parse_special is what turns "<start_of_turn>" etc. into
// their single tokens. Note that it does so inside message contents too (as llama.cpp
// does): a user who types "<end_of_turn>" gets that token.
//
// Semantics follow the real templates (../shared/testdata/chat_templates/) where they
// raise or differ; deliberate differences are listed at each family in chat_template.cc:
//  - roles are "system", "user" and "assistant"; any other is kInvalidArgument
//    "unknown role 'foo'" (tool calls are not supported);
//  - an empty message list is kInvalidArgument;
//  - Gemma and Mistral (except V7) require user/assistant/user/... after an optional first
//    system message, as their templates do, and refuse a system message elsewhere;
//  - Gemma has no system role: the system content goes in front of the first user turn,
//    as Gemma 3's template does (Gemma 2's template raises instead; we use Gemma 3's rule);
//  - Gemma and Llama 3 trim contents (Jinja's `| trim`, Python's whitespace), others don't;
//  - Qwen3 strips <think>...</think> from assistant turns before the last user query and
//    shows an empty think block where the template does; enable_thinking is undefined by
//    default (the model decides), false appends "<think>\n\n</think>\n\n" to the prompt;
//  - Mistral ignores add_generation_prompt ("[/INST]" is the cue), as its template does.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace ts::tok {

enum class ChatFamily {
  kGemma,          // <start_of_turn>user\n...<end_of_turn>\n, "model" for the assistant
  kLlama3,         // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kChatml,         // <|im_start|>role\n...<|im_end|>\n (Qwen2, Qwen2.5 and others)
  kQwen3,          // ChatML with <think> handling
  kMistral,        // [INST] user [/INST]assistant</s> with spaces (v1, v3)
  kMistralTekken,  // [INST]user[/INST]assistant</s> (v3-tekken: Mistral-Nemo)
  kMistralV7,      // [SYSTEM_PROMPT]...[/SYSTEM_PROMPT][INST]...[/INST]
  kPhi3,           // <|user|>\n...<|end|>\n<|assistant|>\n
  kDefault,        // fallback: rendered as ChatML
};
// "gemma", "llama3", "chatml", "qwen3", "mistral", "mistral-tekken", "mistral-v7", "phi3",
// "default".
std::string_view chat_family_name(ChatFamily f);

// How the family was chosen.
enum class ChatSource {
  kTemplate,      // recognised in tokenizer.chat_template
  kArchitecture,  // no (recognised) template: inferred from general.architecture
  kFallback,      // nothing matched: kDefault
  kOverride,      // named by the caller (from_name)
};

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;  // end with the cue for the assistant's turn
  // Qwen3 only: nullopt leaves it undefined as in the template's default (the model may
  // think); false asks for no thinking (an empty think block in the prompt).
  std::optional<bool> enable_thinking;
};

class ChatTemplate {
 public:
  // From the GGUF's tokenizer.chat_template, general.architecture and vocabulary (for the
  // llama3 inference and the EOS text that Mistral and Phi-3 write). Errors: kDataLoss when
  // one of those keys has the wrong type. An absent or unrecognised template is not an
  // error (see the rules above).
  static Result<ChatTemplate> detect(const gguf::File& f);
  // The same rules on a template text ("" = none) and an architecture name ("" = none);
  // without a vocabulary, llama is never inferred as llama3.
  static ChatTemplate from_text(std::string_view template_text, std::string_view arch);
  // A family by its chat_family_name(), for a command-line override; the family's
  // template-independent defaults are used. kInvalidArgument for an unknown name.
  static Result<ChatTemplate> from_name(std::string_view name);

  ChatFamily family() const { return family_; }
  ChatSource source() const { return source_; }
  // One line saying which rule chose the family, e.g. "no tokenizer.chat_template;
  // architecture 'gemma3' -> gemma".
  const std::string& reason() const { return reason_; }
  // Whether the template itself writes {{ bos_token }} (render() never does). A caller
  // whose vocabulary does not add BOS may want to add it when this is true.
  bool template_adds_bos() const { return template_adds_bos_; }
  // Texts of the tokens that end an assistant turn in this family, most specific first
  // ("<end_of_turn>", "<|eot_id|>", "<|im_end|>", "</s>", "<|end|>"). The engine stops on
  // Tokenizer::is_eog(); these are for stop-string matching and for checks.
  const std::vector<std::string>& stop_texts() const { return stop_texts_; }

  // Errors: kInvalidArgument for an empty list, an unknown role, or an order the family's
  // template rejects (the message says which rule).
  Result<std::string> render(std::span<const ChatMessage> messages, const ChatRenderOptions& opt) const;
  Result<std::string> render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    ChatRenderOptions opt;
    opt.add_generation_prompt = add_generation_prompt;
    return render(messages, opt);
  }

 private:
  ChatTemplate() = default;
  friend struct ChatTemplateBuilder;

  ChatFamily family_ = ChatFamily::kDefault;
  ChatSource source_ = ChatSource::kFallback;
  std::string reason_;
  bool template_adds_bos_ = false;
  std::vector<std::string> stop_texts_;
  std::string eos_text_;            // Mistral, Phi-3: the EOS text the template writes
  // Details read from the template text.
  std::string default_system_;      // ChatML: system prompt used when none is given
  std::string gemma_system_sep_ = "\n\n";  // Gemma: between system text and first user text
  bool llama3_preamble_ = false;    // Llama 3.1+: system header with knowledge/today dates
  std::string llama3_cutoff_ = "December 2023";
  std::string llama3_date_ = "26 Jul 2024";
  bool qwen_think_in_prompt_ = false;   // Qwen thinking models: prompt ends in "<think>\n"
  std::string inst_open_ = "[INST]";    // Mistral: "[INST]" or "[INST] "
  std::string inst_close_ = "[/INST]";  // Mistral: "[/INST]" or " [/INST]"
  std::string sys_open_ = "[SYSTEM_PROMPT]";  // Mistral V7
  bool mistral_system_ok_ = true;   // Mistral v1 templates have no system role
};

}  // namespace ts::tok
