// The vocabulary shared by both models: token texts, types, scores, special ids, the
// end-of-generation set and the special-token splitter. Loaded once from GGUF metadata,
// following llama.cpp's llama_vocab::load (defaults, overrides by key, tokens recognised by
// their text), so that ids and flags agree with llama.cpp for the same file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "flat_map.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ts::tok::detail {

// Per-token flags that are not in GGUF (llama.cpp sets them by model name).
enum : uint8_t {
  kAttrLstrip = 1,  // a split-out special token eats the whitespace before it
  kAttrRstrip = 2,  // ... and after it
};

// A piece of the input after special tokens are split out: a special token (token >= 0)
// or raw text [off, off + len).
struct Fragment {
  TokenId token;
  size_t off;
  size_t len;
};

struct Vocab;

// Finds special-token texts in the input. llama.cpp tries every special token, longest
// first, against every remaining text fragment; that is O(specials x text) per call. Here a
// trie over the special texts first finds which of them occur in the input at all (one
// pass), and only those go through llama.cpp's procedure, so the result is identical.
class SpecialSplitter {
 public:
  void build(const Vocab& v);
  void split(const Vocab& v, std::string_view text, bool parse_special, std::vector<Fragment>& out) const;
  size_t n_specials() const { return n_specials_; }

 private:
  U64Map edges_;                   // (node << 8 | byte) -> child node
  std::vector<TokenId> node_token_;  // the special token ending at node, or -1
  bool first_byte_[256] = {};
  size_t n_specials_ = 0;
};

struct Vocab {
  VocabKind kind = VocabKind::kSpm;
  std::string model;  // tokenizer.ggml.model
  std::string pre;    // tokenizer.ggml.pre
  TextPool texts;
  TextIndex index;
  std::vector<float> scores;  // n() entries (0 when the file has none)
  std::vector<TokenType> types;
  std::vector<uint8_t> attrs;  // kAttr* flags

  TokenId bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken, unk = kNoToken;
  TokenId sep = kNoToken, pad = kNoToken, mask = kNoToken;
  TokenId fim_pre = kNoToken, fim_suf = kNoToken, fim_mid = kNoToken;
  TokenId fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool ignore_merges = false;
  std::vector<TokenId> eog;  // sorted, unique
  SpecialSplitter specials;

  int32_t n() const { return int32_t(types.size()); }
  bool valid(TokenId id) const { return id >= 0 && id < n(); }
  std::string_view text(TokenId id) const { return texts.at(size_t(id)); }
  TokenId find(std::string_view s) const { return TokenId(index.find(texts, s)); }
  bool is_special_type(TokenId id) const {
    const TokenType t = types[size_t(id)];
    return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
  }
};

// Reads tokenizer.ggml.* (everything except merges). See Tokenizer::from_gguf for errors.
Result<std::unique_ptr<Vocab>> load_vocab(const gguf::File& f);

// The model-specific half of a tokenizer.
class Model {
 public:
  virtual ~Model() = default;
  // Tokenizes text that holds no special tokens. `after_special`: the text starts the
  // input or follows a special token (SPM adds its space prefix then).
  virtual void encode_text(const Vocab& v, std::string_view text, bool after_special,
                           std::vector<TokenId>& out) const = 0;
  // Appends the bytes of a token of type kNormal.
  virtual void append_normal(const Vocab& v, TokenId id, std::string& out) const = 0;
};

Result<std::unique_ptr<Model>> make_spm_model(const Vocab& v);
Result<std::unique_ptr<Model>> make_bpe_model(const Vocab& v, const gguf::File& f);

}  // namespace ts::tok::detail
