// Tokenizers built from GGUF metadata (tokenizer.ggml.*), matching llama.cpp token for
// token:
//
//  - "llama" model (SentencePiece-style, SPM): a space prefix ("dummy prefix", per
//    tokenizer.ggml.add_space_prefix), spaces written as U+2581 "▁", pieces merged by the
//    highest-scoring bigram, bytes of unknown characters as <0xXX> tokens.
//  - "gpt2" model (byte-level BPE): the text is split by the pre-tokenizer regexes named by
//    tokenizer.ggml.pre (run with PCRE2), each piece's bytes are written in GPT-2's
//    byte-to-character alphabet, then merged by merge rank (tokenizer.ggml.merges).
//
// Special tokens: control, user-defined and unknown tokens are split out of the text
// before the model runs, longest text first (as llama.cpp does). User-defined tokens are
// always split out, as llama.cpp and HuggingFace ("added tokens") do; control and unknown
// tokens only with parse_special.
//
// A Tokenizer is immutable after from_gguf() and safe to use from many threads at once.
// Token ids from outside (requests) are never trusted: out-of-range ids decode to "" and
// have type kUndefined.
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
inline constexpr TokenId kNoToken = -1;

enum class TokenType : int32_t {  // as stored in tokenizer.ggml.token_type
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

enum class VocabKind { kSpm, kBpe };

namespace detail {
struct Vocab;
class Model;
}  // namespace detail

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Errors: kNotFound (no tokenizer.ggml.model / tokens / merges), kUnimplemented (model
  // other than "llama" and "gpt2", or an unknown tokenizer.ggml.pre), kDataLoss (arrays of
  // the wrong type or length). Special-token ids out of range are ignored with a warning,
  // as llama.cpp does (0xFFFFFFFF is a common "none").
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& f);

  // add_special: prepend BOS / append EOS when the vocabulary asks for it (add_bos(),
  // add_eos()). parse_special: text of control tokens ("<|im_start|>") maps to the token
  // instead of being tokenized as plain text (user-defined tokens always map, see above).
  // With add_special = parse_special = false the result is what llama.cpp's
  // test-tokenizer-0 and the golden files expect. Invalid UTF-8 is tokenized byte-wise
  // (<0xXX> byte tokens / byte-level characters), never rejected, and always gives the same
  // ids; a byte the vocabulary cannot spell at all is dropped, as llama.cpp does.
  std::vector<TokenId> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes a token stands for (may be part of a UTF-8 sequence). Control and unknown
  // tokens give "" unless `render_special`; user-defined tokens give their text.
  std::string token_to_piece(TokenId id, bool render_special = false) const;
  void append_piece(TokenId id, bool render_special, std::string& out) const;

  // llama.cpp's detokenize (common_detokenize): the concatenated pieces, except that when
  // the vocabulary adds a space prefix, one leading space of the FIRST token's piece is
  // removed. llama.cpp does this only for the very first id: after a leading BOS the space
  // stays (decode([BOS, ▁Hello]) == " Hello"). So decode(encode(x, false, false)) == x for
  // plain text. For streamed output use StreamDecoder or token_to_piece (no stripping).
  std::string decode(std::span<const TokenId> ids, bool render_special = false) const;

  VocabKind kind() const;
  std::string_view pre_tokenizer() const;  // tokenizer.ggml.pre ("" for SPM)
  int32_t n_vocab() const;
  bool is_valid(TokenId id) const { return id >= 0 && id < n_vocab(); }
  std::string_view token_text(TokenId id) const;  // "" when out of range
  TokenType token_type(TokenId id) const;         // kUndefined when out of range
  float token_score(TokenId id) const;            // 0 when out of range or no scores
  // The id whose text is exactly `text` (the raw vocabulary string, e.g. "▁Hello" or
  // "ĠHello"). With duplicate texts the last id wins, as in llama.cpp.
  std::optional<TokenId> find_token(std::string_view text) const;

  TokenId bos_id() const;  // kNoToken when none
  TokenId eos_id() const;
  TokenId eot_id() const;  // tokenizer.ggml.eot_token_id or found by text (<|eot_id|>, ...)
  TokenId unk_id() const;
  TokenId pad_id() const;
  bool add_bos() const;
  bool add_eos() const;
  bool add_space_prefix() const;
  // End of generation: EOS, EOT, EOM, and tokens named <|eot_id|>, <|im_end|>, <|end|>,
  // <end_of_turn>, <|endoftext|>, <|eom_id|>, <|end_of_text|>, ... (llama.cpp's list).
  bool is_eog(TokenId id) const;
  std::span<const TokenId> eog_ids() const;  // sorted

 private:
  Tokenizer(std::unique_ptr<detail::Vocab> vocab, std::unique_ptr<detail::Model> model);

  std::unique_ptr<detail::Vocab> vocab_;
  std::unique_ptr<detail::Model> model_;
};

// Streaming detokenization: push token ids one at a time and get back text that is always
// valid UTF-8 and ends on a complete character. Bytes of an unfinished character are held
// back until it completes; bytes that can never form a character become U+FFFD, and so does
// an unfinished character left at flush(). Concatenating push()es and flush() gives the
// pieces' bytes whenever those are valid UTF-8.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, bool render_special = false)
      : tok_(t), render_special_(render_special) {}
  std::string push(TokenId id);
  // Pushes raw bytes (for callers that produce pieces themselves).
  std::string push_bytes(std::string_view bytes);
  std::string flush();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::string pending_;
};

}  // namespace ts::tok
