// Byte-level BPE ("gpt2" model), as llama.cpp's llm_tokenizer_bpe: the pre-tokenizer
// splits the text into pieces; each piece starts as one symbol per byte (its byte-level
// character) and the adjacent pair with the lowest merge rank is merged until no pair has
// a rank (ties go to the leftmost pair).
//
// Symbols are token ids, so a merge is one hash look-up on the pair of ids and no strings
// are built while encoding. Merges whose parts or result are not in the vocabulary (never
// the case for files converted from HuggingFace) get ids past the vocabulary, which keeps
// llama.cpp's string semantics exactly.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "byte_level.h"
#include "pretokenizer.h"
#include "vocab.h"

namespace ts::tok::detail {
namespace {

class BpeModel final : public Model {
 public:
  static Result<std::unique_ptr<Model>> create(const Vocab& v, const gguf::File& f) {
    const PreTokenizerSpec* spec = find_pre_tokenizer(v.pre);
    if (spec == nullptr) return unimplemented("tokenizer.ggml.pre '" + v.pre + "' is not supported");
    std::unique_ptr<BpeModel> m(new BpeModel());
    TS_ASSIGN_OR_RETURN(m->pre_, PreTokenizer::create(*spec));
    TS_RETURN_IF_ERROR(m->load_merges(v, f));
    const ByteLevel& bl = ByteLevel::get();
    for (int b = 0; b < 256; ++b) m->byte_syms_[b] = m->symbol_id(v, bl.encode(uint8_t(b)), false);
    return std::unique_ptr<Model>(std::move(m));
  }

  void encode_text(const Vocab& v, std::string_view text, bool /*after_special*/,
                   std::vector<TokenId>& out) const override {
    std::vector<std::string_view> pieces;
    pre_->split(text, pieces);
    Work w;
    for (std::string_view p : pieces) encode_piece(v, p, w, out);
  }

  void append_normal(const Vocab& v, TokenId id, std::string& out) const override {
    ByteLevel::get().decode_append(v.text(id), out);
  }

 private:
  // 32-bit fields keep the heap small: a piece is at most kMaxPiece bytes.
  struct Sym {
    int32_t id;  // token id, an id past the vocabulary (extras_), or -1
    int32_t start, len;
    int32_t prev, next;
  };
  struct Bigram {
    uint32_t rank;
    int32_t left, right;
    int32_t left_id, right_id, result;
  };
  struct Lower {  // lowest rank first, then leftmost (llama.cpp's llm_bigram_bpe::comparator)
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };
  struct Work {
    std::vector<Sym> syms;
    std::vector<Bigram> heap;
    std::string scratch;
  };

  BpeModel() = default;

  static constexpr size_t kMaxPiece = size_t(1) << 28;
  static uint64_t pair_key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }

  // The symbol id of `s`: its token id, else its id among the merge-only strings.
  int32_t symbol_id(const Vocab& v, std::string_view s, bool create) {
    const TokenId id = v.find(s);
    if (id >= 0) return id;
    auto it = extras_.find(std::string(s));
    if (it != extras_.end()) return it->second;
    if (!create) return -1;
    const int32_t e = v.n() + int32_t(extras_.size());
    extras_.emplace(std::string(s), e);
    return e;
  }

  Status load_merges(const Vocab& v, const gguf::File& f) {
    const gguf::Value* m = f.find("tokenizer.ggml.merges");
    if (m == nullptr) return not_found("tokenizer.ggml.merges is missing (needed by the gpt2 model)");
    if (!m->is_array() || m->elem_type() != gguf::ValueType::kString)
      return data_loss("tokenizer.ggml.merges: expected an array of strings");
    if (m->size() >= (1ull << 28)) return data_loss("tokenizer.ggml.merges: too many merges");
    merges_.reserve(m->size());
    std::string both;
    for (uint64_t i = 0; i < m->size(); ++i) {
      const std::string_view line = m->string_at(i);
      const size_t sp = line.find(' ', 1);  // from 1, as llama.cpp: a part may start with ' '
      if (sp == std::string_view::npos) continue;  // llama.cpp files it under ("", ""): inert
      const std::string_view a = line.substr(0, sp), b = line.substr(sp + 1);
      both.assign(a);
      both.append(b);
      const int32_t l = symbol_id(v, a, true), r = symbol_id(v, b, true), res = symbol_id(v, both, true);
      merges_.insert(pair_key(l, r), (uint64_t(i) << 32) | uint64_t(uint32_t(res)));  // first rank wins
    }
    return Status::ok();
  }

  void add_bigram(Work& w, int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return;
    const int32_t l = w.syms[left].id, r = w.syms[right].id;
    if (l < 0 || r < 0) return;
    const uint64_t* m = merges_.find(pair_key(l, r));
    if (m == nullptr) return;
    w.heap.push_back({uint32_t(*m >> 32), left, right, l, r, int32_t(uint32_t(*m))});
    std::push_heap(w.heap.begin(), w.heap.end(), Lower());
  }

  // A symbol that is no token: llama.cpp emits the single-byte tokens of its byte-level
  // text, where they exist.
  void emit_fallback(const Vocab& v, std::string_view raw, Work& w, std::vector<TokenId>& out) const {
    w.scratch.clear();
    ByteLevel::get().encode_append(raw, w.scratch);
    for (char c : w.scratch) {
      const TokenId id = v.find(std::string_view(&c, 1));
      if (id >= 0) out.push_back(id);
    }
  }

  void encode_piece(const Vocab& v, std::string_view raw, Work& w, std::vector<TokenId>& out) const {
    if (raw.empty()) return;
    if (raw.size() > kMaxPiece) {  // > 256 MiB in one piece: encode it in slices
      for (size_t off = 0; off < raw.size(); off += kMaxPiece) encode_piece(v, raw.substr(off, kMaxPiece), w, out);
      return;
    }
    if (v.ignore_merges) {  // llama3: a piece that is a whole token is taken as is
      w.scratch.clear();
      ByteLevel::get().encode_append(raw, w.scratch);
      const TokenId id = v.find(w.scratch);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    w.syms.clear();
    w.heap.clear();
    const int32_t n = int32_t(raw.size());
    for (int32_t i = 0; i < n; ++i)
      w.syms.push_back({byte_syms_[uint8_t(raw[i])], i, 1, i - 1, i + 1 == n ? -1 : i + 1});
    for (int32_t i = 1; i < n; ++i) add_bigram(w, i - 1, i);

    while (!w.heap.empty()) {
      std::pop_heap(w.heap.begin(), w.heap.end(), Lower());
      const Bigram b = w.heap.back();
      w.heap.pop_back();
      Sym& l = w.syms[b.left];
      Sym& r = w.syms[b.right];
      // Stale: a side was merged since the pair was queued (ids only ever grow longer).
      if (l.len == 0 || r.len == 0 || l.id != b.left_id || r.id != b.right_id || l.next != b.right) continue;
      l.id = b.result;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) w.syms[r.next].prev = b.left;
      add_bigram(w, l.prev, b.left);
      add_bigram(w, b.left, l.next);
    }

    for (int32_t i = 0; i != -1; i = w.syms[i].next) {
      const Sym& s = w.syms[i];
      if (s.id >= 0 && s.id < v.n()) {
        out.push_back(s.id);
      } else {
        emit_fallback(v, raw.substr(size_t(s.start), size_t(s.len)), w, out);
      }
    }
  }

  std::unique_ptr<PreTokenizer> pre_;
  U64Map merges_;  // (left id, right id) -> rank << 32 | result id
  std::unordered_map<std::string, int32_t> extras_;  // merge-only strings -> ids >= n_vocab
  int32_t byte_syms_[256] = {};
};

}  // namespace

Result<std::unique_ptr<Model>> make_bpe_model(const Vocab& v, const gguf::File& f) {
  return BpeModel::create(v, f);
}

}  // namespace ts::tok::detail
