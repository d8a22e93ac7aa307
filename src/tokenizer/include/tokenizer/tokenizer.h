// Tokenizers built from GGUF metadata (tokenizer.ggml.*): SentencePiece-style ("llama"
// model: scores + byte fallback) and byte-level BPE ("gpt2" model: merges + a
// pre-tokenizer chosen by tokenizer.ggml.pre, run with PCRE2).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace ts::tok {

using TokenId = int32_t;

enum class TokenType : int32_t {  // as stored in tokenizer.ggml.token_type
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Errors: kNotFound (no tokenizer.ggml.model), kUnimplemented (unknown model or
  // pre-tokenizer), kDataLoss (inconsistent arrays, bad ids).
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& f);

  // add_special: prepend BOS (and append EOS) when the vocabulary asks for it.
  // parse_special: text of control/user-defined tokens ("<|im_start|>") maps to the token
  // instead of being tokenized as plain text. Invalid UTF-8 is tokenized byte-wise, never
  // rejected or crashed on.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const = 0;

  // The bytes a token stands for (may be part of a UTF-8 sequence). Control tokens give ""
  // unless `render_special`.
  virtual std::string token_to_piece(TokenId id, bool render_special = false) const = 0;
  std::string decode(std::span<const TokenId> ids, bool render_special = false) const;

  int32_t n_vocab() const { return int32_t(texts_.size()); }
  std::string_view token_text(TokenId id) const { return texts_[size_t(id)]; }
  TokenType token_type(TokenId id) const { return types_[size_t(id)]; }
  std::optional<TokenId> find_token(std::string_view text) const;

  TokenId bos_id() const { return bos_; }  // -1 when none
  TokenId eos_id() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End of generation: EOS, EOT and similar (<|im_end|>, <end_of_turn>, <|eot_id|>).
  bool is_eog(TokenId id) const;

 protected:
  std::vector<std::string> texts_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::vector<TokenId> eog_ids_;
  TokenId bos_ = -1, eos_ = -1, unk_ = -1, pad_ = -1;
  bool add_bos_ = false, add_eos_ = false;
};

// Streaming detokenization: push token ids one at a time and get back text that always
// ends on a complete UTF-8 character; bytes of an unfinished character are held back until
// it completes (or flushed as U+FFFD at the end if it never does).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t) : tok_(t) {}
  std::string push(TokenId id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace ts::tok
