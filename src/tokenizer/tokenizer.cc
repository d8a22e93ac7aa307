#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/utf8.h"
#include "vocab.h"

namespace ts::tok {

using detail::Fragment;
using detail::Vocab;

Tokenizer::Tokenizer(std::unique_ptr<Vocab> vocab, std::unique_ptr<detail::Model> model)
    : vocab_(std::move(vocab)), model_(std::move(model)) {}

Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& f) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Vocab> v, detail::load_vocab(f));
  std::unique_ptr<detail::Model> m;
  if (v->kind == VocabKind::kSpm) {
    TS_ASSIGN_OR_RETURN(m, detail::make_spm_model(*v));
  } else {
    TS_ASSIGN_OR_RETURN(m, detail::make_bpe_model(*v, f));
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(v), std::move(m)));
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Vocab& v = *vocab_;
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && v.add_bos && v.bos != kNoToken) out.push_back(v.bos);

  std::vector<Fragment> frags;
  v.specials.split(v, text, parse_special, frags);
  bool after_special = true;  // the start of the input counts as "after a special token"
  for (const Fragment& fr : frags) {
    if (fr.token != kNoToken) {
      out.push_back(fr.token);
      after_special = true;
    } else {
      model_->encode_text(v, text.substr(fr.off, fr.len), after_special, out);
      after_special = false;
    }
  }
  if (add_special && v.add_eos && v.eos != kNoToken) out.push_back(v.eos);
  return out;
}

void Tokenizer::append_piece(TokenId id, bool render_special, std::string& out) const {
  const Vocab& v = *vocab_;
  if (!v.valid(id)) return;
  switch (v.types[size_t(id)]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      if (render_special) out.append(v.text(id));
      return;
    case TokenType::kUserDefined:
      out.append(v.text(id));
      return;
    case TokenType::kNormal:
      model_->append_normal(v, id, out);
      return;
    case TokenType::kByte: {
      // SPM byte tokens are "<0xXX>"; llama.cpp renders byte-typed tokens of BPE
      // vocabularies as nothing.
      const std::string_view t = v.text(id);
      if (v.kind != VocabKind::kSpm || t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return;
      auto hex = [](char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
      };
      const int hi = hex(t[3]), lo = hex(t[4]);
      if (hi >= 0 && lo >= 0) out += char(hi * 16 + lo);
      return;
    }
    case TokenType::kUnused:
    case TokenType::kUndefined:
      return;
  }
}

std::string Tokenizer::token_to_piece(TokenId id, bool render_special) const {
  std::string out;
  append_piece(id, render_special, out);
  return out;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool render_special) const {
  std::string out;
  bool remove_space = vocab_->add_space_prefix;  // only ever for the first id
  for (TokenId id : ids) {
    const size_t before = out.size();
    append_piece(id, render_special, out);
    if (remove_space && out.size() > before && out[before] == ' ') out.erase(before, 1);
    remove_space = false;
  }
  return out;
}

VocabKind Tokenizer::kind() const { return vocab_->kind; }
std::string_view Tokenizer::pre_tokenizer() const { return vocab_->pre; }
int32_t Tokenizer::n_vocab() const { return vocab_->n(); }
std::string_view Tokenizer::token_text(TokenId id) const { return is_valid(id) ? vocab_->text(id) : ""; }
TokenType Tokenizer::token_type(TokenId id) const {
  return is_valid(id) ? vocab_->types[size_t(id)] : TokenType::kUndefined;
}
float Tokenizer::token_score(TokenId id) const { return is_valid(id) ? vocab_->scores[size_t(id)] : 0.0f; }
std::optional<TokenId> Tokenizer::find_token(std::string_view text) const {
  const TokenId id = vocab_->find(text);
  if (id < 0) return std::nullopt;
  return id;
}
TokenId Tokenizer::bos_id() const { return vocab_->bos; }
TokenId Tokenizer::eos_id() const { return vocab_->eos; }
TokenId Tokenizer::eot_id() const { return vocab_->eot; }
TokenId Tokenizer::unk_id() const { return vocab_->unk; }
TokenId Tokenizer::pad_id() const { return vocab_->pad; }
bool Tokenizer::add_bos() const { return vocab_->add_bos; }
bool Tokenizer::add_eos() const { return vocab_->add_eos; }
bool Tokenizer::add_space_prefix() const { return vocab_->add_space_prefix; }
bool Tokenizer::is_eog(TokenId id) const {
  return std::binary_search(vocab_->eog.begin(), vocab_->eog.end(), id);
}
std::span<const TokenId> Tokenizer::eog_ids() const { return vocab_->eog; }

// ---------------------------------------------------------------------------------------
// StreamDecoder

namespace {

// Moves the complete part of `pending` to the result: well-formed characters as they are,
// ill-formed bytes as U+FFFD. An unfinished character at the end stays in `pending`.
std::string drain(std::string& pending) {
  std::string out;
  size_t i = 0;
  while (i < pending.size()) {
    const utf8::Step st = utf8::scan(pending, i);
    if (st.status == utf8::Scan::kIncomplete) break;
    if (st.status == utf8::Scan::kOk) {
      out.append(pending, i, st.len);
    } else {
      out.append(utf8::kReplacement);
    }
    i += st.len;
  }
  pending.erase(0, i);
  return out;
}

}  // namespace

std::string StreamDecoder::push(TokenId id) {
  tok_.append_piece(id, render_special_, pending_);
  return drain(pending_);
}

std::string StreamDecoder::push_bytes(std::string_view bytes) {
  pending_.append(bytes);
  return drain(pending_);
}

std::string StreamDecoder::flush() {
  std::string out = drain(pending_);
  if (!pending_.empty()) {
    out.append(utf8::kReplacement);
    pending_.clear();
  }
  return out;
}

}  // namespace ts::tok
