// Loading tokenizer.ggml.* the way llama.cpp's llama_vocab::load does: model defaults,
// then keys, then special tokens recognised by their text.
#include "vocab.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>

#include "core/log.h"
#include "pretokenizer.h"

namespace ts::tok::detail {
namespace {

// Token texts llama.cpp recognises when the file does not name the token by id. The first
// text present wins (llama.cpp's order there depends on its hash map; ours is this list).
constexpr std::array<std::string_view, 10> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek
    "<end_of_utterance>"};
constexpr std::array<std::string_view, 1> kEomTexts = {"<|eom_id|>"};
constexpr std::array<std::string_view, 7> kFimPreTexts = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>"};
constexpr std::array<std::string_view, 7> kFimSufTexts = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>"};
constexpr std::array<std::string_view, 7> kFimMidTexts = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>"};
constexpr std::array<std::string_view, 4> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"};
constexpr std::array<std::string_view, 5> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                          "<REPO>", "<reponame>"};
constexpr std::array<std::string_view, 1> kFimSepTexts = {"<|file_sep|>"};
// Every token with one of these texts ends generation.
constexpr std::array<std::string_view, 12> kEogTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>"};

bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

TokenType to_token_type(int64_t t) {
  return (t >= 0 && t <= 6) ? TokenType(t) : TokenType::kUndefined;
}

// Reads an optional bool key into `out`.
Status read_bool(const gguf::File& f, std::string_view key, bool& out) {
  if (f.find(key) == nullptr) return Status::ok();
  auto r = f.get_bool(key);
  if (!r.is_ok()) return data_loss(std::string(key) + ": " + r.status().message());
  out = *r;
  return Status::ok();
}

// Reads an optional token-id key into `id`. As in llama.cpp, an id outside the vocabulary
// keeps the default (0xFFFFFFFF, -1 mean "none" and are not worth a warning).
Status read_id(const gguf::File& f, std::string_view key, int32_t n_vocab, TokenId& id) {
  const gguf::Value* val = f.find(key);
  if (val == nullptr) return Status::ok();
  const auto i = val->as_int();
  if (!i) return data_loss(std::string(key) + ": expected an integer, got " + gguf::value_type_name(val->type()));
  if (*i >= 0 && *i < n_vocab) {
    id = TokenId(*i);
  } else if (*i != -1 && *i != 0xFFFFFFFFll) {
    TS_LOG_WARN("tokenizer: %.*s = %lld is not a token id (n_vocab %d), keeping %d\n", int(key.size()),
                key.data(), static_cast<long long>(*i), n_vocab, id);
  }
  return Status::ok();
}

template <size_t N>
TokenId find_first(const Vocab& v, const std::array<std::string_view, N>& texts) {
  for (std::string_view t : texts) {
    const TokenId id = v.find(t);
    if (id >= 0) return id;
  }
  return kNoToken;
}

// llama.cpp turns tokens it recognises by text into control tokens (the converters of some
// models typed them as normal or user-defined).
void force_control(Vocab& v, TokenId id) {
  if (v.valid(id)) v.types[size_t(id)] = TokenType::kControl;
}

// Unset special tokens found by their text (llama.cpp: "auto-detect special tokens").
void detect_by_text(Vocab& v) {
  auto detect = [&](TokenId& id, const auto& texts) {
    if (id != kNoToken) return;
    id = find_first(v, texts);
    force_control(v, id);
  };
  detect(v.eot, kEotTexts);
  detect(v.eom, kEomTexts);
  detect(v.fim_pre, kFimPreTexts);
  detect(v.fim_suf, kFimSufTexts);
  detect(v.fim_mid, kFimMidTexts);
  detect(v.fim_pad, kFimPadTexts);
  detect(v.fim_rep, kFimRepTexts);
  detect(v.fim_sep, kFimSepTexts);
}

void build_eog(Vocab& v) {
  std::vector<TokenId>& eog = v.eog;
  for (TokenId id : {v.fim_pad, v.fim_rep, v.fim_sep})
    if (v.valid(id)) eog.push_back(id);
  for (std::string_view t : kEogTexts) {
    const TokenId id = v.find(t);
    if (id >= 0) {
      eog.push_back(id);
      force_control(v, id);
    }
  }
  // gpt-oss: these structure tokens are rendered as text (llama.cpp makes them user-defined).
  for (std::string_view t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    const TokenId id = v.find(t);
    if (id >= 0) v.types[size_t(id)] = TokenType::kUserDefined;
  }
  for (TokenId id : {v.eos, v.eot, v.eom})
    if (v.valid(id)) eog.push_back(id);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  // o200k_harmony: with <|return|> and <|call|> present, <|end|> separates messages
  // instead of ending generation.
  auto has = [&](std::string_view t) {
    const TokenId id = v.find(t);
    return id >= 0 && std::binary_search(eog.begin(), eog.end(), id);
  };
  if (has("<|return|>") && has("<|call|>") && has("<|end|>")) {
    const TokenId end = v.find("<|end|>");
    eog.erase(std::find(eog.begin(), eog.end(), end));
    v.types[size_t(end)] = TokenType::kUserDefined;
  }
}

// Token attributes llama.cpp derives from the model name (they are not in GGUF).
void set_attrs_by_name(const gguf::File& f, Vocab& v) {
  std::string name;
  if (auto r = f.get_string("general.name"); r.is_ok()) name = std::string(*r);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](char c) { return char(std::tolower(static_cast<unsigned char>(c))); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (TokenId id = 0; id < v.n(); ++id)
      if (v.is_special_type(id)) v.attrs[size_t(id)] |= kAttrRstrip;
    if (TokenId id = v.find("</s>"); id >= 0) v.attrs[size_t(id)] |= kAttrRstrip;
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"})
      if (TokenId id = v.find(t); id >= 0) v.attrs[size_t(id)] &= uint8_t(~kAttrRstrip);
  }
}

Status load_tokens(const gguf::File& f, Vocab& v) {
  const gguf::Value* toks = f.find("tokenizer.ggml.tokens");
  if (toks == nullptr) return not_found("tokenizer.ggml.tokens is missing");
  if (!toks->is_array() || toks->elem_type() != gguf::ValueType::kString)
    return data_loss("tokenizer.ggml.tokens: expected an array of strings");
  const uint64_t n = toks->size();
  if (n == 0) return data_loss("tokenizer.ggml.tokens is empty");
  if (n >= (uint64_t(1) << 30)) return data_loss("tokenizer.ggml.tokens: too many tokens");

  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i) total += toks->string_at(i).size() + 16;
  if (total >= UINT32_MAX) return data_loss("tokenizer.ggml.tokens: token texts exceed 4 GiB");
  v.texts.bytes.reserve(total);
  v.texts.offsets.reserve(n + 1);
  for (uint64_t i = 0; i < n; ++i) {
    const std::string_view s = toks->string_at(i);
    if (s.empty()) {  // llama.cpp names empty tokens so that every text is unique-ish
      v.texts.push("[EMPTY_" + std::to_string(i) + "]");
    } else {
      v.texts.push(s);
    }
  }

  v.scores.assign(n, 0.0f);
  if (const gguf::Value* sc = f.find("tokenizer.ggml.scores")) {
    if (!sc->is_array() || !(gguf::is_float_type(sc->elem_type()) || gguf::is_integer_type(sc->elem_type())))
      return data_loss("tokenizer.ggml.scores: expected a numeric array");
    if (sc->size() != n)
      return data_loss("tokenizer.ggml.scores: " + std::to_string(sc->size()) + " entries for " +
                       std::to_string(n) + " tokens");
    if (sc->elem_type() == gguf::ValueType::kFloat32) {
      std::memcpy(v.scores.data(), sc->array_bytes().data(), n * sizeof(float));  // little-endian host
    } else {
      for (uint64_t i = 0; i < n; ++i) v.scores[i] = float(sc->float_at(i));
    }
  }

  v.types.assign(n, TokenType::kNormal);  // llama.cpp: all normal without the array
  if (const gguf::Value* ty = f.find("tokenizer.ggml.token_type")) {
    if (!ty->is_array() || !gguf::is_integer_type(ty->elem_type()))
      return data_loss("tokenizer.ggml.token_type: expected an integer array");
    if (ty->size() != n)
      return data_loss("tokenizer.ggml.token_type: " + std::to_string(ty->size()) + " entries for " +
                       std::to_string(n) + " tokens");
    if (ty->elem_type() == gguf::ValueType::kInt32) {
      const uint8_t* p = ty->array_bytes().data();
      for (uint64_t i = 0; i < n; ++i) {
        int32_t t;
        std::memcpy(&t, p + 4 * i, 4);
        v.types[i] = to_token_type(t);
      }
    } else {
      for (uint64_t i = 0; i < n; ++i) v.types[i] = to_token_type(ty->int_at(i));
    }
  }
  v.attrs.assign(n, 0);
  v.index.build(v.texts);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Vocab>> load_vocab(const gguf::File& f) {
  auto v = std::make_unique<Vocab>();

  auto model = f.get_string("tokenizer.ggml.model");
  if (!model.is_ok()) {
    if (model.status().code() == StatusCode::kNotFound) return not_found("tokenizer.ggml.model is missing");
    return data_loss("tokenizer.ggml.model: " + model.status().message());
  }
  v->model = std::string(*model);
  if (f.find("tokenizer.ggml.pre") != nullptr) {
    auto pre = f.get_string("tokenizer.ggml.pre");
    if (!pre.is_ok()) return data_loss("tokenizer.ggml.pre: " + pre.status().message());
    v->pre = std::string(*pre);
  }

  if (v->model == "llama") {
    v->kind = VocabKind::kSpm;
    v->bos = 1;
    v->eos = 2;
    v->unk = 0;
    v->add_space_prefix = true;
    v->add_bos = true;
  } else if (v->model == "gpt2") {
    v->kind = VocabKind::kBpe;
    const PreTokenizerSpec* spec = find_pre_tokenizer(v->pre);
    if (spec == nullptr)
      return unimplemented("tokenizer.ggml.pre '" + v->pre +
                           "' is not supported (supported: gpt2/default, llama3/llama-bpe, qwen2, "
                           "deepseek-coder, starcoder, falcon and their aliases)");
    v->bos = 11;  // llama.cpp's defaults for "gpt2" (Falcon's ids)
    v->eos = 11;
    v->add_space_prefix = false;
    v->add_bos = spec->add_bos;
    v->ignore_merges = spec->ignore_merges;
  } else {
    return unimplemented("tokenizer.ggml.model '" + v->model + "' is not supported (llama, gpt2)");
  }
  TS_RETURN_IF_ERROR(read_bool(f, "tokenizer.ggml.add_space_prefix", v->add_space_prefix));
  TS_RETURN_IF_ERROR(load_tokens(f, *v));

  const int32_t n = v->n();
  const std::pair<std::string_view, TokenId*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &v->bos},
      {"tokenizer.ggml.eos_token_id", &v->eos},
      {"tokenizer.ggml.eot_token_id", &v->eot},
      {"tokenizer.ggml.eom_token_id", &v->eom},
      {"tokenizer.ggml.unknown_token_id", &v->unk},
      {"tokenizer.ggml.seperator_token_id", &v->sep},  // sic, as written by the converters
      {"tokenizer.ggml.padding_token_id", &v->pad},
      {"tokenizer.ggml.mask_token_id", &v->mask},
      {"tokenizer.ggml.fim_pre_token_id", &v->fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &v->fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &v->fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &v->fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &v->fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &v->fim_sep},
      {"tokenizer.ggml.prefix_token_id", &v->fim_pre},  // deprecated names
      {"tokenizer.ggml.suffix_token_id", &v->fim_suf},
      {"tokenizer.ggml.middle_token_id", &v->fim_mid},
  };
  for (const auto& [key, id] : ids) TS_RETURN_IF_ERROR(read_id(f, key, n, *id));
  TS_RETURN_IF_ERROR(read_bool(f, "tokenizer.ggml.add_bos_token", v->add_bos));
  TS_RETURN_IF_ERROR(read_bool(f, "tokenizer.ggml.add_eos_token", v->add_eos));

  // Defaults that do not fit this vocabulary (a tiny test vocabulary) mean "none".
  for (TokenId* id : {&v->bos, &v->eos, &v->eot, &v->eom, &v->unk, &v->sep, &v->pad, &v->mask})
    if (!v->valid(*id)) *id = kNoToken;

  detect_by_text(*v);
  build_eog(*v);
  set_attrs_by_name(f, *v);
  v->specials.build(*v);
  return v;
}

// ---------------------------------------------------------------------------------------
// Special tokens

void SpecialSplitter::build(const Vocab& v) {
  edges_ = U64Map();
  node_token_.assign(1, kNoToken);
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  n_specials_ = 0;
  for (TokenId id = 0; id < v.n(); ++id) {
    if (!v.is_special_type(id)) continue;
    const std::string_view t = v.text(id);
    ++n_specials_;
    first_byte_[uint8_t(t[0])] = true;
    uint64_t node = 0;
    for (unsigned char c : t) {
      const uint64_t key = (node << 8) | c;
      if (const uint64_t* child = edges_.find(key)) {
        node = *child;
      } else {
        const uint64_t child_node = node_token_.size();
        node_token_.push_back(kNoToken);
        edges_.insert(key, child_node);
        node = child_node;
      }
    }
    if (node_token_[node] == kNoToken) node_token_[node] = id;  // duplicate text: lowest id
  }
}

void SpecialSplitter::split(const Vocab& v, std::string_view text, bool parse_special,
                            std::vector<Fragment>& out) const {
  out.clear();
  if (text.empty()) return;

  // 1. Which special tokens occur in the text (and may be split out)?
  std::vector<TokenId> found;
  if (n_specials_ > 0) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (!first_byte_[uint8_t(text[i])]) continue;
      uint64_t node = 0;
      for (size_t j = i; j < text.size(); ++j) {
        const uint64_t* child = edges_.find((node << 8) | uint8_t(text[j]));
        if (child == nullptr) break;
        node = *child;
        const TokenId id = node_token_[node];
        if (id == kNoToken) continue;
        // Without parse_special only user-defined tokens are split out (llama.cpp and
        // HuggingFace skip control and unknown tokens then).
        if (parse_special || v.types[size_t(id)] == TokenType::kUserDefined) found.push_back(id);
      }
    }
  }
  out.push_back({kNoToken, 0, text.size()});
  if (found.empty()) return;
  std::sort(found.begin(), found.end(), [&](TokenId a, TokenId b) {
    const size_t la = v.text(a).size(), lb = v.text(b).size();
    return la != lb ? la > lb : a < b;
  });
  found.erase(std::unique(found.begin(), found.end()), found.end());

  // 2. llama.cpp's tokenizer_st_partition over the tokens found: longest text first, each
  // splits every remaining raw fragment at all of its occurrences.
  std::vector<Fragment> next;
  for (const TokenId id : found) {
    const std::string_view tt = v.text(id);
    const uint8_t attr = v.attrs[size_t(id)];
    next.clear();
    for (const Fragment& fr : out) {
      if (fr.token != kNoToken) {
        next.push_back(fr);
        continue;
      }
      size_t base = fr.off, len = fr.len;
      while (true) {
        const size_t m = text.substr(0, base + len).find(tt, base);
        if (m == std::string_view::npos) {
          if (len > 0) next.push_back({kNoToken, base, len});
          break;
        }
        if (m > base) {
          size_t left = m - base;
          if (attr & kAttrLstrip)
            while (left > 0 && is_c_space(text[base + left - 1])) --left;
          if (left > 0) next.push_back({kNoToken, base, left});
        }
        next.push_back({id, m, tt.size()});
        const size_t end = base + len;
        if (m + tt.size() >= end) break;
        base = m + tt.size();
        len = end - base;
        if (attr & kAttrRstrip) {
          while (len > 0 && is_c_space(text[base])) {
            ++base;
            --len;
          }
        }
      }
    }
    out.swap(next);
  }
}

}  // namespace ts::tok::detail
