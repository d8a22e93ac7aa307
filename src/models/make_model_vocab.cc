// Vocabularies for the model maker: learned from a small built-in English text by pair
// merging, then filled to the requested size with pieces made of two earlier pieces, so
// every id is a real, reachable-looking token and the vocabulary round-trips any text
// (bytes fall back to byte tokens).
//
// Everything here is deterministic: ties between equally frequent pairs break by the pair's
// text, and the fill draws from an Rng with a fixed seed.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/utf8.h"
#include "models/make_model.h"

namespace ts::models {
namespace {

// Written for this project: short plain sentences with the common words, endings and
// punctuation of English, so the learned pieces look like a real vocabulary's.
constexpr std::string_view kText =
    "Once upon a time there was a little girl named Mia who lived in a small house near the "
    "river. Every morning she walked to the old bridge and counted the boats that passed "
    "under it. Some days there were three boats, and some days there were twelve. One day "
    "she saw a boat with a red sail and a tired dog sitting at the front.\n"
    "\"Hello, dog!\" said Mia. \"Where are you going?\" The dog looked at her and wagged its "
    "tail. The man who steered the boat laughed and said, \"We are going to the market in "
    "the next town. Would you like to come with us?\" Mia thought about it for a moment. "
    "She was not allowed to go far from home, so she shook her head and waved goodbye.\n"
    "The next morning the boat came back. This time it carried apples, bread, warm blankets "
    "and a box of shiny buttons. The man gave Mia a green button and told her that it was "
    "a lucky one. She kept it in her pocket and touched it whenever she was afraid.\n"
    "Years later, when Mia was grown up, she became a teacher. She told the children in her "
    "class about the river, the boats and the dog with the happy tail. They always asked "
    "to see the button, and she always showed it to them, smiling.\n"
    "A computer reads numbers very quickly. It can add 2 and 3, multiply 17 by 24, or sort "
    "a list of 1000 names in less than a second. People write programs that tell the "
    "computer what to do, step by step. A good program is clear, tested and easy to change; "
    "a bad one is slow, confusing and full of surprises.\n"
    "The weather today is cold and windy, with rain in the afternoon. Tomorrow will be "
    "warmer and mostly sunny, with a light breeze from the south. On Saturday there may be "
    "thunderstorms in the evening, so remember to bring an umbrella if you are going out.\n"
    "Tom and his sister Anna wanted to build a tree house. They found some wood behind the "
    "barn, borrowed their father's hammer and asked their neighbour for nails. It took "
    "them four days of hard work, but when it was finished they had the best tree house "
    "in the whole village. They painted it blue and yellow and invited all their friends.\n"
    "Why do birds sing in the morning? Scientists think that singing early helps them to "
    "claim their territory and to find a partner. The air is calm and cool at dawn, so "
    "their songs travel further than they would later in the day.\n"
    "\"I can't find my shoes,\" said Ben. \"Did you look under the bed?\" asked his mother. "
    "He looked under the bed, behind the door and inside the closet. At last he found them "
    "in the garden, where the puppy had carried them to play.\n"
    "The recipe is simple: mix two cups of flour with one cup of milk, add an egg and a "
    "pinch of salt, then stir until the batter is smooth. Heat a pan, pour in a little "
    "batter and cook each pancake until it is golden on both sides.\n"
    "In the beginning the universe was hot and dense. As it expanded, it cooled, and the "
    "first atoms formed. Much later, stars were born, planets gathered around them, and on "
    "at least one small planet, life began to grow and change over billions of years.\n";

// --- SentencePiece-style ----------------------------------------------------------------

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary

// Splits UTF-8 into characters (invalid bytes become one-byte "characters").
std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// Learns up to `max_merges` pair merges over `words` (symbol sequences with counts):
// repeatedly merges the most frequent adjacent pair (ties: the smaller pair text), while it
// occurs at least twice. Returns the merged pairs in order.
std::vector<std::pair<std::string, std::string>> learn_merges(
    std::vector<std::pair<std::vector<std::string>, int>> words, size_t max_merges) {
  std::vector<std::pair<std::string, std::string>> merges;
  while (merges.size() < max_merges) {
    std::map<std::pair<std::string, std::string>, int> counts;  // ordered: ties break by text
    for (const auto& [syms, n] : words)
      for (size_t i = 0; i + 1 < syms.size(); ++i) counts[{syms[i], syms[i + 1]}] += n;
    const std::pair<std::string, std::string>* best = nullptr;
    int best_n = 1;
    for (const auto& [pair, n] : counts)
      if (n > best_n) best = &pair, best_n = n;
    if (!best) break;
    const auto pair = *best;
    merges.push_back(pair);
    for (auto& [syms, n] : words) {
      std::vector<std::string> merged;
      merged.reserve(syms.size());
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == pair.first && syms[i + 1] == pair.second) {
          merged.push_back(pair.first + pair.second);
          ++i;
        } else {
          merged.push_back(syms[i]);
        }
      }
      syms = std::move(merged);
    }
  }
  return merges;
}

// Adds tokens made of an existing piece and a base piece until `tokens` has `target`
// entries: the left part is any piece of at most kMaxLeftBytes, the right one a base piece
// (`pieces` as given: characters and learned merges) that does not start a word, so a word
// boundary marker never lands inside a token. Calls add(a, b) per new token.
template <typename IsWordStart, typename Add>
Status fill_synthetic(std::vector<std::string>& tokens, const std::vector<int32_t>& pieces, size_t target,
                      IsWordStart is_word_start, Add add) {
  constexpr size_t kMaxLeftBytes = 12;
  std::unordered_set<std::string> seen(tokens.begin(), tokens.end());
  std::vector<int32_t> right, left;
  for (int32_t id : pieces) {
    if (!is_word_start(tokens[size_t(id)])) right.push_back(id);
    if (tokens[size_t(id)].size() <= kMaxLeftBytes) left.push_back(id);
  }
  if (right.empty() || left.empty()) return internal_error("vocabulary fill: no base pieces");
  Rng rng(0x70CE7E5ull);  // fixed: the vocabulary does not depend on the model seed
  size_t attempts = 0;
  while (tokens.size() < target) {
    if (++attempts > 20 * target + 100000) return internal_error("vocabulary fill did not converge");
    const std::string& a = tokens[size_t(left[rng.next_u64() % left.size()])];
    const std::string& b = tokens[size_t(right[rng.next_u64() % right.size()])];
    std::string ab = a + b;
    if (!seen.insert(ab).second) continue;
    add(a, b);
    if (ab.size() <= kMaxLeftBytes) left.push_back(int32_t(tokens.size()));
    tokens.push_back(std::move(ab));
  }
  return Status::ok();
}

// --- byte-level BPE ---------------------------------------------------------------------

// GPT-2's reversible map from bytes to printable code points: printable Latin-1 bytes map
// to themselves, the other 68 to U+0100.. in byte order.
bool byte_is_direct(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

std::vector<std::string> byte_to_unicode_table() {
  std::vector<uint32_t> cp(256, 0);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) cp[size_t(b)] = byte_is_direct(b) ? uint32_t(b) : next++;
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) {
    const uint32_t c = cp[size_t(b)];
    std::string s;
    utf8::append_cp(s, c);
    out[size_t(b)] = std::move(s);
  }
  return out;
}

bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// A rough stand-in for the Qwen2 pre-tokenizer (which the real tokenizer runs with PCRE2):
// an optional space with a run of letters, single digits, an optional space with a run of
// punctuation, runs of whitespace. Only the learned merges depend on it.
std::vector<std::string> pre_split(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    const auto at = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    if (text[j] == ' ' && j + 1 < text.size() && !is_space(at(j + 1))) ++j;
    if (is_letter(at(j))) {
      while (j < text.size() && is_letter(at(j))) ++j;
    } else if (is_digit(at(j))) {
      ++j;
    } else if (!is_space(at(j))) {
      while (j < text.size() && !is_letter(at(j)) && !is_digit(at(j)) && !is_space(at(j))) ++j;
    } else {
      while (j < text.size() && is_space(at(j))) ++j;
    }
    out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

std::string_view builtin_text() { return kText; }

Result<Vocab> make_spm_vocab(int64_t n_vocab) {
  if (n_vocab < 512) return invalid_argument("an SPM vocabulary needs at least 512 tokens");
  Vocab v;
  v.model = "llama";
  v.unk = 0, v.bos = 1, v.eos = 2;
  v.add_bos = true;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.emplace_back(buf);
    v.types.push_back(6);  // byte
  }
  v.scores.assign(v.tokens.size(), 0.0f);

  // Words as SentencePiece sees them: spaces become U+2581 and start the next word.
  std::map<std::string, int> word_counts;
  std::string word;
  for (char c : kText) {
    if (c == ' ' || c == '\n') {
      if (!word.empty()) ++word_counts[word];
      word = c == ' ' ? kSpace : "";
    } else {
      word.push_back(c);
    }
  }
  if (!word.empty()) ++word_counts[word];
  std::vector<std::pair<std::vector<std::string>, int>> words;
  std::vector<std::string> chars;
  for (const auto& [w, n] : word_counts) {
    words.emplace_back(utf8_chars(w), n);
    for (const auto& ch : words.back().first) chars.push_back(ch);
  }
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());

  std::vector<int32_t> pieces;  // ids that may be combined by the fill
  // Characters score lowest: the tokenizer merges by the score of the merged piece.
  for (size_t k = 0; k < chars.size(); ++k) {
    pieces.push_back(int32_t(v.tokens.size()));
    v.tokens.push_back(chars[k]);
    v.types.push_back(1);
    v.scores.push_back(-1e6f - float(k));
  }
  if (int64_t(v.tokens.size()) > n_vocab) return invalid_argument("vocabulary too small for the base pieces");
  std::unordered_set<std::string> seen(v.tokens.begin(), v.tokens.end());
  float rank = 0;
  const auto merges = learn_merges(std::move(words), size_t(n_vocab) - v.tokens.size());
  for (const auto& [a, b] : merges) {
    std::string ab = a + b;
    if (!seen.insert(ab).second || int64_t(v.tokens.size()) >= n_vocab) continue;
    pieces.push_back(int32_t(v.tokens.size()));
    v.tokens.push_back(std::move(ab));
    v.types.push_back(1);
    v.scores.push_back(-(rank++));
  }
  const std::string space = kSpace;
  TS_RETURN_IF_ERROR(fill_synthetic(
      v.tokens, pieces, size_t(n_vocab),
      [&](const std::string& p) { return p.compare(0, space.size(), space) == 0; },
      [&](const std::string&, const std::string&) {
        v.types.push_back(1);
        v.scores.push_back(-(rank++));
      }));
  return v;
}

Result<Vocab> make_bpe_vocab(int64_t n_vocab) {
  if (n_vocab < 512) return invalid_argument("a BPE vocabulary needs at least 512 tokens");
  static constexpr const char* kSpecials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  constexpr int64_t kNumSpecials = 3;
  const int64_t n_regular = n_vocab - kNumSpecials;

  Vocab v;
  v.model = "gpt2";
  v.pre = "qwen2";
  const std::vector<std::string> byte_map = byte_to_unicode_table();
  // Byte tokens in GPT-2's order: the printable ones first, then the remapped ones.
  std::vector<int> order;
  for (int pass = 0; pass < 2; ++pass)
    for (int b = 0; b < 256; ++b)
      if (byte_is_direct(b) == (pass == 0)) order.push_back(b);
  std::vector<int32_t> pieces;
  for (int b : order) {
    const unsigned char c = static_cast<unsigned char>(b);
    if ((is_letter(c) && c < 0x80) || c == ' ') pieces.push_back(int32_t(v.tokens.size()));
    v.tokens.push_back(byte_map[size_t(b)]);
  }

  std::map<std::string, int> chunk_counts;
  for (const auto& chunk : pre_split(kText)) ++chunk_counts[chunk];
  std::vector<std::pair<std::vector<std::string>, int>> words;
  for (const auto& [chunk, n] : chunk_counts) {
    std::vector<std::string> syms;
    for (char c : chunk) syms.push_back(byte_map[static_cast<unsigned char>(c)]);
    words.emplace_back(std::move(syms), n);
  }
  std::unordered_set<std::string> seen(v.tokens.begin(), v.tokens.end());
  const auto merges = learn_merges(std::move(words), size_t(n_regular) - v.tokens.size());
  for (const auto& [a, b] : merges) {
    std::string ab = a + b;
    if (seen.count(ab)) {
      v.merges.push_back(a + " " + b);  // another pair already made this token
      continue;
    }
    if (int64_t(v.tokens.size()) >= n_regular) break;
    seen.insert(ab);
    v.merges.push_back(a + " " + b);
    pieces.push_back(int32_t(v.tokens.size()));
    v.tokens.push_back(std::move(ab));
  }
  const std::string space = byte_map[' '];  // "Ġ"
  TS_RETURN_IF_ERROR(fill_synthetic(
      v.tokens, pieces, size_t(n_regular),
      [&](const std::string& p) { return p.compare(0, space.size(), space) == 0; },
      [&](const std::string& a, const std::string& b) { v.merges.push_back(a + " " + b); }));
  v.types.assign(v.tokens.size(), 1);  // normal
  for (const char* s : kSpecials) {
    v.tokens.emplace_back(s);
    v.types.push_back(3);  // control
  }
  v.bos = v.eos = v.pad = int32_t(n_regular);  // <|endoftext|>, as in Qwen2 base models
  v.add_bos = false;
  return v;
}

}  // namespace ts::models
