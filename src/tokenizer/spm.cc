// SentencePiece-style tokenization ("llama" model), as llama.cpp's llm_tokenizer_spm:
// spaces become U+2581, the text is split into characters, and the adjacent pair whose
// concatenation is the highest-scoring token is merged until no pair is a token (ties go
// to the leftmost pair). Characters that are no token become byte tokens <0xXX>.
#include <cstdio>
#include <queue>

#include "vocab.h"
#include "core/utf8.h"

namespace ts::tok::detail {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

class SpmModel final : public Model {
 public:
  explicit SpmModel(const Vocab& v) {
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      TokenId id = v.find(hex);
      if (id < 0) id = v.find(std::string(1, char(b)));
      if (id < 0) id = v.unk;  // llama.cpp would fail here; unk is the graceful answer
      byte_tokens_[b] = id;
    }
  }

  void encode_text(const Vocab& v, std::string_view text, bool after_special,
                   std::vector<TokenId>& out) const override {
    std::string s;
    s.reserve(text.size() + text.size() / 2 + 3);
    if (v.add_space_prefix && after_special) s += kSpace;
    for (char c : text) {
      if (c == ' ') {
        s += kSpace;
      } else {
        s += c;
      }
    }
    if (s.empty()) return;

    // One symbol per character (a well-formed UTF-8 sequence, or a single invalid byte);
    // merged symbols stay contiguous in `s`.
    struct Sym {
      size_t start, len;
      int64_t prev, next;
    };
    std::vector<Sym> syms;
    syms.reserve(s.size());
    for (size_t off = 0; off < s.size();) {
      const size_t len = utf8::char_len(s, off);
      const int64_t i = int64_t(syms.size());
      syms.push_back({off, len, i - 1, off + len == s.size() ? -1 : i + 1});
      off += len;
    }

    struct Bigram {
      float score;
      int64_t left, right;
      size_t size;
    };
    // Highest score first, then leftmost (llama.cpp's llm_bigram_spm::comparator).
    auto lower = [](const Bigram& a, const Bigram& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
    auto try_add = [&](int64_t left, int64_t right) {
      if (left < 0 || right < 0) return;
      const size_t size = syms[left].len + syms[right].len;
      const TokenId id = v.find(std::string_view(s).substr(syms[left].start, size));
      if (id < 0) return;
      queue.push({v.scores[size_t(id)], left, right, size});
    };
    for (int64_t i = 1; i < int64_t(syms.size()); ++i) try_add(i - 1, i);

    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Sym& l = syms[b.left];
      Sym& r = syms[b.right];
      // Stale: one side was merged into something else since the pair was queued.
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }

    // A final symbol is a token, or a single character that is none: its bytes fall back.
    for (int64_t i = 0; i != -1; i = syms[i].next) {
      const std::string_view piece = std::string_view(s).substr(syms[i].start, syms[i].len);
      const TokenId id = v.find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (unsigned char c : piece)
        if (byte_tokens_[c] >= 0) out.push_back(byte_tokens_[c]);
    }
  }

  void append_normal(const Vocab& v, TokenId id, std::string& out) const override {
    const std::string_view t = v.text(id);
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpace.size(), kSpace) == 0) {
        out += ' ';
        i += kSpace.size();
      } else {
        out += t[i++];
      }
    }
  }

 private:
  TokenId byte_tokens_[256];
};

}  // namespace

Result<std::unique_ptr<Model>> make_spm_model(const Vocab& v) {
  return std::unique_ptr<Model>(new SpmModel(v));
}

}  // namespace ts::tok::detail
