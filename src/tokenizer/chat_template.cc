// Chat template detection (markers in the Jinja text, then the architecture) and one
// renderer per family. The header lists the detection rules and the shared semantics; the
// comments at each renderer give the template behaviour it follows and any deliberate
// difference.
#include "tokenizer/chat.h"

#include <string>

#include "core/utf8.h"

namespace ts::tok {
namespace {

bool contains(std::string_view hay, std::string_view needle) {
  return hay.find(needle) != std::string_view::npos;
}

// ---------------------------------------------------------------------------------------
// Python string helpers: Jinja's `trim` is Python's str.strip(), and Qwen3's template uses
// split / lstrip('\n') / rstrip('\n').

// Python's str.isspace() for one code point.
bool py_is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

// The character at s[i] (core/utf8.h): its length, or 0 when the bytes there are not a
// well-formed character (invalid bytes never count as whitespace).
size_t decode_utf8(std::string_view s, size_t i, char32_t& cp) {
  const utf8::Step st = utf8::scan(s, i);
  if (st.status != utf8::Scan::kOk) return 0;
  cp = char32_t(st.cp);
  return st.len;
}

// str.strip(): Unicode whitespace off both ends.
std::string_view py_strip(std::string_view s) {
  char32_t cp = 0;
  size_t begin = 0;
  while (begin < s.size()) {
    const size_t n = decode_utf8(s, begin, cp);
    if (n == 0 || !py_is_space(cp)) break;
    begin += n;
  }
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // back to the lead byte of the last character
    while (start > begin && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    const size_t n = decode_utf8(s, start, cp);
    if (n != end - start || !py_is_space(cp)) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

std::string_view lstrip_nl(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_nl(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}
// s.split(sep)[-1] and s.split(sep)[0].
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t p = s.rfind(sep);
  return p == std::string_view::npos ? s : s.substr(p + sep.size());
}
std::string_view before_first(std::string_view s, std::string_view sep) {
  return s.substr(0, s.find(sep));
}

// ---------------------------------------------------------------------------------------
// Reading details out of the template's string literals.

// Undoes the escapes of a Jinja string literal (\n, \t, \\, \', \").
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) { out += s[i]; continue; }
    const char e = s[++i];
    out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
  }
  return out;
}

// The quoted literal that starts right after `marker` (skipping spaces), e.g. marker
// "date_string = " on `date_string = "26 Jul 2024"` gives "26 Jul 2024".
std::optional<std::string> literal_after(std::string_view text, std::string_view marker) {
  size_t p = text.find(marker);
  if (p == std::string_view::npos) return std::nullopt;
  p += marker.size();
  while (p < text.size() && text[p] == ' ') ++p;
  if (p >= text.size() || (text[p] != '\'' && text[p] != '"')) return std::nullopt;
  const char q = text[p++];
  for (size_t e = p; e < text.size(); ++e) {
    if (text[e] == '\\') { ++e; continue; }
    if (text[e] == q) return unescape(text.substr(p, e - p));
  }
  return std::nullopt;
}

// A newline as a template writes it inside a literal: the escape "\n" or a real newline.
size_t newline_len(std::string_view s, size_t p) {
  if (s.substr(p, 2) == "\\n") return 2;
  if (p < s.size() && s[p] == '\n') return 1;
  return 0;
}

// ChatML templates that supply a system prompt when the conversation has none (Qwen2:
// "You are a helpful assistant.", Qwen2.5: "You are Qwen, created by Alibaba Cloud. ...")
// write it as one literal '<|im_start|>system\n...<|im_end|>'. A literal that is
// interrupted by a quote (' + messages[0]['content'] + ') is the other branch.
std::string chatml_default_system(std::string_view text) {
  constexpr std::string_view kHead = "<|im_start|>system";
  for (size_t p = text.find(kHead); p != std::string_view::npos; p = text.find(kHead, p + 1)) {
    const size_t nl = newline_len(text, p + kHead.size());
    if (nl == 0) continue;
    const size_t start = p + kHead.size() + nl;
    const size_t end = text.find("<|im_end|>", start);
    if (end == std::string_view::npos) break;
    const std::string_view body = text.substr(start, end - start);
    if (body.empty() || body.find_first_of("'\"{}") != std::string_view::npos) continue;
    return unescape(body);
  }
  return "";
}

// "December 2023" from "Cutting Knowledge Date: December 2023\n".
std::optional<std::string> llama3_cutoff(std::string_view text) {
  constexpr std::string_view kKey = "Cutting Knowledge Date: ";
  const size_t p = text.find(kKey);
  if (p == std::string_view::npos) return std::nullopt;
  const size_t start = p + kKey.size();
  size_t end = start;
  while (end < text.size() && newline_len(text, end) == 0 && text[end] != '"' && text[end] != '\'') ++end;
  if (end == start) return std::nullopt;
  return std::string(text.substr(start, end - start));
}

bool has_literal(std::string_view text, std::string_view s) {
  return contains(text, "'" + std::string(s) + "'") || contains(text, "\"" + std::string(s) + "\"");
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Detection.

std::string_view chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::kGemma: return "gemma";
    case ChatFamily::kLlama3: return "llama3";
    case ChatFamily::kChatml: return "chatml";
    case ChatFamily::kQwen3: return "qwen3";
    case ChatFamily::kMistral: return "mistral";
    case ChatFamily::kMistralTekken: return "mistral-tekken";
    case ChatFamily::kMistralV7: return "mistral-v7";
    case ChatFamily::kPhi3: return "phi3";
    case ChatFamily::kDefault: return "default";
  }
  return "unknown";
}

// Builds ChatTemplates (a friend: the fields stay private).
struct ChatTemplateBuilder {
  static ChatTemplate make(ChatFamily f, ChatSource src, std::string reason) {
    ChatTemplate t;
    t.family_ = f;
    t.source_ = src;
    t.reason_ = std::move(reason);
    switch (f) {
      case ChatFamily::kGemma: t.stop_texts_ = {"<end_of_turn>"}; break;
      case ChatFamily::kLlama3: t.stop_texts_ = {"<|eot_id|>", "<|eom_id|>"}; break;
      case ChatFamily::kChatml:
      case ChatFamily::kQwen3:
      case ChatFamily::kDefault: t.stop_texts_ = {"<|im_end|>"}; break;
      case ChatFamily::kMistral:
        t.inst_open_ = "[INST] ";  // v3 spacing: "[INST] user[/INST]"
        [[fallthrough]];
      case ChatFamily::kMistralTekken:
      case ChatFamily::kMistralV7:
        t.eos_text_ = "</s>";
        t.stop_texts_ = {"</s>"};
        break;
      case ChatFamily::kPhi3:
        t.eos_text_ = "<|endoftext|>";
        t.stop_texts_ = {"<|end|>", "<|endoftext|>"};
        break;
    }
    t.template_adds_bos_ = f == ChatFamily::kGemma || f == ChatFamily::kLlama3 || f == ChatFamily::kMistral ||
                           f == ChatFamily::kMistralTekken || f == ChatFamily::kMistralV7;
    return t;
  }

  // The family named by markers in `text`, with the rule that matched; nullopt when none
  // did (`why` then says what was unsupported, if anything).
  static std::optional<ChatTemplate> from_markers(std::string_view text, std::string& why) {
    const auto found = [&](ChatFamily f, std::string_view marker) {
      ChatTemplate t = make(f, ChatSource::kTemplate,
                            "tokenizer.chat_template contains " + std::string(marker) + " -> " +
                                std::string(chat_family_name(f)));
      t.template_adds_bos_ = contains(text, "bos_token");
      return t;
    };
    if (contains(text, "<start_of_turn>")) {
      ChatTemplate t = found(ChatFamily::kGemma, "'<start_of_turn>'");
      if (auto sep = literal_after(text, "first_user_prefix = messages[0]['content'] +")) t.gemma_system_sep_ = *sep;
      return t;
    }
    if (contains(text, "<|start_header_id|>")) {
      ChatTemplate t = found(ChatFamily::kLlama3, "'<|start_header_id|>'");
      if (auto cutoff = llama3_cutoff(text)) {
        t.llama3_preamble_ = true;
        t.llama3_cutoff_ = *cutoff;
        if (auto date = literal_after(text, "set date_string =")) t.llama3_date_ = *date;
      }
      return t;
    }
    if (contains(text, "<|im_start|>")) {
      if (contains(text, "<|im_sep|>")) {
        why = "ChatML with <|im_sep|> (Phi-4 style) is not supported";
        return std::nullopt;
      }
      const bool think = contains(text, "</think>");
      ChatTemplate t = think ? found(ChatFamily::kQwen3, "'<|im_start|>' and '</think>'")
                             : found(ChatFamily::kChatml, "'<|im_start|>'");
      t.default_system_ = chatml_default_system(text);
      t.qwen_think_in_prompt_ = think && (contains(text, "assistant\\n<think>\\n'") ||
                                          contains(text, "assistant\\n<think>\\n\""));
      return t;
    }
    if (contains(text, "[INST]")) {
      if (contains(text, "<<SYS>>")) {
        why = "Llama-2 style [INST] <<SYS>> template is not supported";
        return std::nullopt;
      }
      ChatTemplate t;
      if (contains(text, "[SYSTEM_PROMPT]")) {
        t = found(ChatFamily::kMistralV7, "'[INST]' and '[SYSTEM_PROMPT]'");
        if (contains(text, "[SYSTEM_PROMPT] ")) t.sys_open_ = "[SYSTEM_PROMPT] ";
      } else if (has_literal(text, "[INST]")) {
        t = found(ChatFamily::kMistralTekken, "a bare '[INST]' literal");
      } else {
        t = found(ChatFamily::kMistral, "'[INST]'");
        t.mistral_system_ok_ = contains(text, "system_message");
      }
      // Spacing exactly as the template's literals write it.
      t.inst_open_ = has_literal(text, "[INST] ") ? "[INST] " : "[INST]";
      t.inst_close_ = has_literal(text, " [/INST]") ? " [/INST]" : "[/INST]";
      return t;
    }
    if (contains(text, "<|user|>") && contains(text, "<|assistant|>") && contains(text, "<|end|>")) {
      return found(ChatFamily::kPhi3, "'<|user|>', '<|assistant|>' and '<|end|>'");
    }
    return std::nullopt;
  }

  static std::optional<ChatFamily> from_arch(std::string_view arch, bool vocab_has_llama3_header) {
    if (arch.starts_with("gemma")) return ChatFamily::kGemma;  // gemma, gemma2, gemma3, gemma3n
    if (arch.starts_with("qwen3")) return ChatFamily::kQwen3;  // qwen3, qwen3moe
    if (arch.starts_with("qwen2")) return ChatFamily::kChatml; // qwen2, qwen2moe, qwen2vl
    if (arch == "phi3") return ChatFamily::kPhi3;
    if (arch == "llama" && vocab_has_llama3_header) return ChatFamily::kLlama3;
    return std::nullopt;
  }

  static ChatTemplate choose(std::string_view text, std::string_view arch, bool vocab_has_llama3_header) {
    std::string why;
    const bool has_text = !py_strip(text).empty();
    if (has_text) {
      if (auto t = from_markers(text, why)) return std::move(*t);
      if (why.empty()) why = "tokenizer.chat_template not recognised (no known marker)";
    } else {
      why = "no tokenizer.chat_template";
    }
    const std::string arch_s = arch.empty() ? "(none)" : "'" + std::string(arch) + "'";
    if (auto f = from_arch(arch, vocab_has_llama3_header)) {
      std::string reason = why + "; architecture " + arch_s;
      if (*f == ChatFamily::kLlama3) reason += " with a <|start_header_id|> token";
      ChatTemplate t = make(*f, ChatSource::kArchitecture, reason + " -> " + std::string(chat_family_name(*f)));
      return t;
    }
    return make(ChatFamily::kDefault, ChatSource::kFallback,
                why + "; no rule for architecture " + arch_s +
                    " -> default (ChatML: <|im_start|>role\\n...<|im_end|>)");
  }
};

ChatTemplate ChatTemplate::from_text(std::string_view template_text, std::string_view arch) {
  return ChatTemplateBuilder::choose(template_text, arch, false);
}

Result<ChatTemplate> ChatTemplate::from_name(std::string_view name) {
  for (ChatFamily f : {ChatFamily::kGemma, ChatFamily::kLlama3, ChatFamily::kChatml, ChatFamily::kQwen3,
                       ChatFamily::kMistral, ChatFamily::kMistralTekken, ChatFamily::kMistralV7,
                       ChatFamily::kPhi3, ChatFamily::kDefault}) {
    if (chat_family_name(f) == name) {
      return ChatTemplateBuilder::make(f, ChatSource::kOverride, "chat template '" + std::string(name) + "' chosen by the caller");
    }
  }
  return invalid_argument("unknown chat template '" + std::string(name) +
                          "' (known: gemma, llama3, chatml, qwen3, mistral, mistral-tekken, mistral-v7, phi3, default)");
}

Result<ChatTemplate> ChatTemplate::detect(const gguf::File& f) {
  std::string_view text, arch;
  if (f.find("tokenizer.chat_template") != nullptr) {
    TS_ASSIGN_OR_RETURN(text, f.get_string("tokenizer.chat_template"));
  }
  if (f.find("general.architecture") != nullptr) {
    TS_ASSIGN_OR_RETURN(arch, f.get_string("general.architecture"));
  }
  const gguf::Value* tokens = f.get_array("tokenizer.ggml.tokens");
  if (tokens != nullptr && tokens->elem_type() != gguf::ValueType::kString) {
    return data_loss("tokenizer.ggml.tokens is not an array of strings");
  }
  bool has_header = false;
  if (tokens != nullptr && arch == "llama") {
    for (uint64_t i = 0; i < tokens->size() && !has_header; ++i) has_header = tokens->string_at(i) == "<|start_header_id|>";
  }
  ChatTemplate t = ChatTemplateBuilder::choose(text, arch, has_header);
  // The template writes the vocabulary's EOS text (Mistral after each answer, Phi-3 at the
  // end without a generation prompt).
  if (tokens != nullptr && !t.eos_text_.empty() && f.find("tokenizer.ggml.eos_token_id") != nullptr) {
    TS_ASSIGN_OR_RETURN(int64_t eos, f.get_int("tokenizer.ggml.eos_token_id"));
    if (eos >= 0 && uint64_t(eos) < tokens->size() && !tokens->string_at(uint64_t(eos)).empty()) {
      t.eos_text_ = std::string(tokens->string_at(uint64_t(eos)));
      if (t.family_ != ChatFamily::kPhi3) t.stop_texts_ = {t.eos_text_};
    }
  }
  return t;
}

// ---------------------------------------------------------------------------------------
// Rendering.

namespace {

Status check_roles(std::span<const ChatMessage> msgs) {
  if (msgs.empty()) return invalid_argument("chat: no messages");
  for (const ChatMessage& m : msgs) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return invalid_argument("unknown role '" + m.role + "' (supported: system, user, assistant)");
    }
  }
  return Status::ok();
}

// After an optional leading system message: user, assistant, user, ... (Gemma and Mistral
// templates raise otherwise). Returns the messages after the system message.
Result<std::span<const ChatMessage>> check_alternation(std::string_view family, std::span<const ChatMessage> msgs) {
  if (msgs.front().role == "system") msgs = msgs.subspan(1);
  if (msgs.empty()) return invalid_argument(std::string(family) + ": a system message needs a user message after it");
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].role == "system") {
      return invalid_argument(std::string(family) + ": a system message is only supported as the first message");
    }
    const char* want = i % 2 == 0 ? "user" : "assistant";
    if (msgs[i].role != want) {
      return invalid_argument(std::string(family) + ": conversation roles must alternate user/assistant/user/... (message " +
                              std::to_string(i) + " after the system message is '" + msgs[i].role + "')");
    }
  }
  return msgs;
}

}  // namespace

Result<std::string> ChatTemplate::render(std::span<const ChatMessage> msgs, const ChatRenderOptions& opt) const {
  TS_RETURN_IF_ERROR(check_roles(msgs));
  std::string out;
  const bool gen = opt.add_generation_prompt;
  switch (family_) {
    case ChatFamily::kGemma: {
      // Gemma 3: a leading system message becomes a prefix of the first user turn
      // (content + "\n\n", untrimmed); "assistant" is "model"; contents are trimmed.
      std::string prefix;
      if (msgs.front().role == "system") prefix = msgs.front().content + gemma_system_sep_;
      TS_ASSIGN_OR_RETURN(std::span<const ChatMessage> turns, check_alternation("gemma", msgs));
      for (size_t i = 0; i < turns.size(); ++i) {
        out += "<start_of_turn>";
        out += turns[i].role == "assistant" ? "model" : "user";
        out += '\n';
        if (i == 0) out += prefix;
        out += py_strip(turns[i].content);
        out += "<end_of_turn>\n";
      }
      if (gen) out += "<start_of_turn>model\n";
      return out;
    }

    case ChatFamily::kLlama3: {
      // Llama 3.1+: a system header is always written, with the knowledge cutoff and the
      // template's fallback date (the template may use today's date via strftime_now; we
      // keep the fixed one so prompts are reproducible), then the trimmed system message.
      // Llama 3.0 writes a leading system message like any other.
      const auto header = [&](std::string_view role) {
        out += "<|start_header_id|>";
        out += role;
        out += "<|end_header_id|>\n\n";
      };
      if (llama3_preamble_) {
        std::string_view system;
        if (msgs.front().role == "system") {
          system = py_strip(msgs.front().content);
          msgs = msgs.subspan(1);
        }
        header("system");
        out += "Cutting Knowledge Date: " + llama3_cutoff_ + "\nToday Date: " + llama3_date_ + "\n\n";
        out += system;
        out += "<|eot_id|>";
      }
      for (const ChatMessage& m : msgs) {
        header(m.role);
        out += py_strip(m.content);
        out += "<|eot_id|>";
      }
      if (gen) header("assistant");
      return out;
    }

    case ChatFamily::kChatml:
    case ChatFamily::kDefault:
    case ChatFamily::kQwen3: {
      // <|im_start|>role\ncontent<|im_end|>\n, untrimmed. Qwen2/2.5 add their default
      // system prompt when the conversation has none.
      if (msgs.front().role != "system" && !default_system_.empty()) {
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      }
      // Qwen3: the last user query; assistant turns after it keep their reasoning.
      size_t last_query = msgs.size() - 1;
      if (family_ == ChatFamily::kQwen3) {
        for (size_t i = msgs.size(); i-- > 0;) {
          const std::string_view c = msgs[i].content;
          if (msgs[i].role == "user" && !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
            last_query = i;
            break;
          }
        }
      }
      for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        out += "<|im_start|>" + m.role + '\n';
        if (family_ != ChatFamily::kQwen3 || m.role != "assistant") {
          out += m.content;
        } else {
          // Qwen3: "<think>r</think>c" splits into reasoning r and content c; before the
          // last query only c is kept, after it both (with an empty think block on the
          // final message).
          std::string_view content = m.content, reasoning;
          if (contains(content, "</think>")) {
            reasoning = lstrip_nl(after_last(rstrip_nl(before_first(m.content, "</think>")), "<think>"));
            content = lstrip_nl(after_last(m.content, "</think>"));
          }
          if (i > last_query && (i + 1 == msgs.size() || !reasoning.empty())) {
            out += "<think>\n";
            out += lstrip_nl(rstrip_nl(reasoning));
            out += "\n</think>\n\n";
            out += lstrip_nl(content);
          } else {
            out += content;
          }
        }
        out += "<|im_end|>\n";
      }
      if (gen) {
        out += "<|im_start|>assistant\n";
        if (family_ == ChatFamily::kQwen3) {
          if (qwen_think_in_prompt_) out += "<think>\n";
          else if (opt.enable_thinking == false) out += "<think>\n\n</think>\n\n";
        }
      }
      return out;
    }

    case ChatFamily::kMistral:
    case ChatFamily::kMistralTekken: {
      // [INST]user[/INST]assistant</s>... with the template's spacing. The system message
      // goes in front of the LAST user message, and only when that is the final message
      // (Mistral-Nemo's `loop.last`; it is dropped otherwise, as the template does). v1
      // templates have no system role and raise. No generation prompt.
      std::string_view system;
      bool has_system = false;
      if (msgs.front().role == "system") {
        if (!mistral_system_ok_) return invalid_argument("mistral: this chat template has no system role");
        system = msgs.front().content;
        has_system = true;
      }
      TS_ASSIGN_OR_RETURN(std::span<const ChatMessage> turns, check_alternation("mistral", msgs));
      for (size_t i = 0; i < turns.size(); ++i) {
        if (turns[i].role == "user") {
          out += inst_open_;
          if (has_system && i + 1 == turns.size()) {
            out += system;
            out += "\n\n";
          }
          out += turns[i].content;
          out += inst_close_;
        } else {
          out += turns[i].content + eos_text_;
        }
      }
      return out;
    }

    case ChatFamily::kMistralV7: {
      // V7: system messages in [SYSTEM_PROMPT] blocks where they stand; no alternation
      // rule. The templates' built-in default system prompt (with today's date) is not
      // reproduced.
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") out += sys_open_ + m.content + "[/SYSTEM_PROMPT]";
        else if (m.role == "user") out += inst_open_ + m.content + inst_close_;
        else out += m.content + eos_text_;
      }
      return out;
    }

    case ChatFamily::kPhi3: {
      // <|role|>\ncontent<|end|>\n; an empty system message is skipped; without a
      // generation prompt the template ends with EOS.
      for (const ChatMessage& m : msgs) {
        if (m.role == "system" && m.content.empty()) continue;
        out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      }
      out += gen ? "<|assistant|>\n" : eos_text_;
      return out;
    }
  }
  return internal_error("chat: unhandled family");
}

}  // namespace ts::tok
