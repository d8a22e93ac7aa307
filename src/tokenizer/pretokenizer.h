// Byte-level BPE pre-tokenizers: the regex lists llama.cpp applies for each value of
// tokenizer.ggml.pre, run with PCRE2 (UTF, Unicode properties, JIT).
//
// The regexes run one after another, as in llama.cpp: the first splits the whole text into
// pieces (matches and the unmatched gaps between them), each next one splits every piece
// again, seeing only that piece (a lookahead stops at the piece's end). `\s` means
// Unicode White_Space exactly as llama.cpp's tables have it (PCRE2's own \s also takes
// U+180E). Invalid UTF-8 never matches (PCRE2_MATCH_INVALID_UTF): it ends up in gap pieces,
// which the BPE model encodes byte by byte.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ts::tok::detail {

struct PreTokenizerSpec {
  std::string_view canonical;            // e.g. "gpt2", "llama3", "qwen2"
  std::vector<std::string_view> regexes;  // in llama.cpp's syntax
  bool ignore_merges = false;            // a piece that is a whole token is taken as is
  bool add_bos = false;                  // default of add_bos for this family
};

// The spec for a tokenizer.ggml.pre value; nullptr when unknown. "default" and "" (no key)
// give GPT-2's regex. (llama.cpp runs an older four-regex set for those, reached by old BPE
// files written before the key existed.)
const PreTokenizerSpec* find_pre_tokenizer(std::string_view pre);

// Rewrites `\s` and `\S` of a llama.cpp regex into explicit White_Space classes.
// kInvalidArgument for `\S` inside a character class (unsupported, unused).
Result<std::string> translate_regex(std::string_view re);

class Regex;

class PreTokenizer {
 public:
  static Result<std::unique_ptr<PreTokenizer>> create(const PreTokenizerSpec& spec);
  ~PreTokenizer();

  // Appends the pieces of `text` (views into it, in order, covering it exactly) to `out`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  PreTokenizer() = default;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace ts::tok::detail
