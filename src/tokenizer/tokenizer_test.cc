// Tokenizer behaviour beyond the golden files: round trips, special tokens, BOS/EOS and
// EOG, invalid UTF-8, the stream decoder, small hand-made vocabularies (Gemma-style SPM
// without a space prefix, llama3/qwen2 BPE), load errors, and load timing.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

namespace ts::tok {
namespace {

const std::string kDir = std::string(TS_SHARED_DIR) + "/testdata/tokenizer/";
const char* const kVocabs[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-coder", "starcoder", "falcon"};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A tokenizer together with the file it came from.
struct Loaded {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& name) {
  Loaded l;
  auto f = gguf::File::open(kDir + "ggml-vocab-" + name + ".gguf");
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (!f.is_ok()) return l;
  l.file = std::move(*f);
  auto t = Tokenizer::from_gguf(*l.file);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (t.is_ok()) l.tok = std::move(*t);
  return l;
}

// A vocabulary written with gguf::Writer, kept alive with its parsed File.
struct Synthetic {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::File> file;
};

Synthetic parse_writer(const gguf::Writer& w) {
  Synthetic s;
  s.bytes = w.to_bytes();
  auto f = gguf::File::parse(s.bytes);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (f.is_ok()) s.file = std::move(*f);
  return s;
}

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

// A small Gemma-style SPM vocabulary: no space prefix, BOS 2, EOS 1, chat control tokens,
// byte fallback.
gguf::Writer gemma_like_writer() {
  std::vector<std::string> toks = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"};
  std::vector<int32_t> types = {kControl, kControl, kControl, kUnknown, kControl, kControl};
  std::vector<float> scores(toks.size(), 0.0f);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    toks.push_back(hex);
    types.push_back(kByte);
    scores.push_back(0.0f);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\xE2\x96\x81", -1}, {"H", -5},  {"e", -5},   {"l", -5},   {"o", -5},         {"u", -5},
      {"s", -5},           {"r", -5},  {"w", -5},   {"d", -5},   {"ll", -3},        {"He", -3},
      {"llo", -2},         {"Hello", -1}, {"\xE2\x96\x81w", -3}, {"or", -3},        {"\xE2\x96\x81wor", -2},
      {"\xE2\x96\x81world", -1}, {"ld", -4}, {"us", -4}, {"user", -1}, {"er", -4}, {"<html>", 0}};
  for (const auto& [p, s] : pieces) {
    toks.push_back(p);
    types.push_back(p == "<html>" ? kUserDefined : kNormal);
    scores.push_back(s);
  }
  gguf::Writer w;
  w.add_string("general.name", "gemma-like");
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string("tokenizer.ggml.pre", "default");
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.bos_token_id", 2);
  w.add_u32("tokenizer.ggml.eos_token_id", 1);
  w.add_u32("tokenizer.ggml.unknown_token_id", 3);
  w.add_u32("tokenizer.ggml.padding_token_id", 0);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_bool("tokenizer.ggml.add_eos_token", false);
  w.add_bool("tokenizer.ggml.add_space_prefix", false);
  return w;
}

// A small byte-level BPE vocabulary: the 256 byte characters, a few merges, and ChatML /
// llama3 control tokens.
gguf::Writer bpe_writer(const std::string& pre) {
  // The byte-level alphabet, in GPT-2's order.
  std::vector<std::string> toks;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? uint32_t(b) : uint32_t(next++);
    std::string s;
    utf8::append_cp(s, cp);
    toks.push_back(s);
  }
  const std::vector<std::string> merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r",
                                           "\xC4\xA0w or", "\xC4\xA0wor ld", "l d", "1 2", "12 3"};
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ');
    toks.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  std::vector<int32_t> types(toks.size(), kNormal);
  for (const char* special : {"<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
    toks.push_back(special);
    types.push_back(kControl);
  }
  gguf::Writer w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_u32("tokenizer.ggml.bos_token_id", uint32_t(toks.size() - 5));  // <|begin_of_text|>
  w.add_u32("tokenizer.ggml.eos_token_id", uint32_t(toks.size() - 1));  // <|endoftext|>
  return w;
}

// ---------------------------------------------------------------------------------------

TEST(Tokenizer, VocabularyFlags) {
  Loaded spm = load("llama-spm");
  ASSERT_TRUE(spm.tok);
  EXPECT_EQ(spm.tok->kind(), VocabKind::kSpm);
  EXPECT_EQ(spm.tok->n_vocab(), 32000);
  EXPECT_EQ(spm.tok->bos_id(), 1);
  EXPECT_EQ(spm.tok->eos_id(), 2);
  EXPECT_EQ(spm.tok->unk_id(), 0);
  EXPECT_TRUE(spm.tok->add_bos());
  EXPECT_FALSE(spm.tok->add_eos());
  EXPECT_TRUE(spm.tok->add_space_prefix());
  EXPECT_EQ(spm.tok->token_text(15043), "\xE2\x96\x81Hello");
  EXPECT_EQ(spm.tok->find_token("\xE2\x96\x81Hello"), 15043);
  EXPECT_EQ(spm.tok->find_token("no such token"), std::nullopt);
  EXPECT_EQ(spm.tok->token_type(1), TokenType::kControl);
  EXPECT_EQ(spm.tok->token_type(13), TokenType::kByte);
  EXPECT_TRUE(spm.tok->is_eog(2));
  EXPECT_FALSE(spm.tok->is_eog(1));

  Loaded gpt2 = load("gpt-2");
  ASSERT_TRUE(gpt2.tok);
  EXPECT_EQ(gpt2.tok->kind(), VocabKind::kBpe);
  EXPECT_EQ(gpt2.tok->pre_tokenizer(), "gpt-2");
  EXPECT_EQ(gpt2.tok->bos_id(), 50256);
  EXPECT_FALSE(gpt2.tok->add_bos());
  EXPECT_FALSE(gpt2.tok->add_space_prefix());
  EXPECT_TRUE(gpt2.tok->is_eog(50256));
  EXPECT_EQ(gpt2.tok->eot_id(), 50256);  // found by its text <|endoftext|>

  Loaded phi3 = load("phi-3");
  ASSERT_TRUE(phi3.tok);
  EXPECT_EQ(phi3.tok->eos_id(), 32000);
  EXPECT_TRUE(phi3.tok->is_eog(32000));  // <|endoftext|>
  EXPECT_TRUE(phi3.tok->is_eog(32007));  // <|end|>
  EXPECT_FALSE(phi3.tok->is_eog(32010)); // <|user|>

  Loaded ds = load("deepseek-coder");
  ASSERT_TRUE(ds.tok);
  EXPECT_TRUE(ds.tok->add_bos());
  EXPECT_EQ(ds.tok->bos_id(), 32013);
  EXPECT_TRUE(ds.tok->is_eog(32014));
}

TEST(Tokenizer, AddSpecial) {
  Loaded spm = load("llama-spm");
  ASSERT_TRUE(spm.tok);
  EXPECT_EQ(spm.tok->encode("Hello world", true, false), (std::vector<TokenId>{1, 15043, 3186}));
  EXPECT_EQ(spm.tok->encode("", true, false), (std::vector<TokenId>{1}));
  EXPECT_EQ(spm.tok->encode("", false, false), (std::vector<TokenId>{}));

  Loaded ds = load("deepseek-coder");
  ASSERT_TRUE(ds.tok);
  const auto ids = ds.tok->encode("Hello", true, false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 32013);

  Loaded gpt2 = load("gpt-2");
  ASSERT_TRUE(gpt2.tok);
  EXPECT_EQ(gpt2.tok->encode("Hello", true, false), gpt2.tok->encode("Hello", false, false));
}

// decode() follows llama.cpp's detokenize: only the very first piece loses its space.
TEST(Tokenizer, DecodeLeadingSpace) {
  Loaded spm = load("llama-spm");
  ASSERT_TRUE(spm.tok);
  const std::vector<TokenId> plain = {15043, 3186};        // ▁Hello ▁world
  const std::vector<TokenId> with_bos = {1, 15043, 3186};  // <s> ▁Hello ▁world
  EXPECT_EQ(spm.tok->decode(plain), "Hello world");
  EXPECT_EQ(spm.tok->decode(with_bos), " Hello world");
  EXPECT_EQ(spm.tok->decode(with_bos, /*render_special=*/true), "<s> Hello world");
  EXPECT_EQ(spm.tok->token_to_piece(15043), " Hello");
  EXPECT_EQ(spm.tok->token_to_piece(1), "");
  EXPECT_EQ(spm.tok->token_to_piece(1, true), "<s>");
  EXPECT_EQ(spm.tok->token_to_piece(13), "\n");  // <0x0A>

  Loaded gpt2 = load("gpt-2");
  ASSERT_TRUE(gpt2.tok);
  const auto ids = gpt2.tok->encode(" Hello world", false, false);
  EXPECT_EQ(gpt2.tok->decode(ids), " Hello world");  // BPE adds no prefix, strips none
}

TEST(Tokenizer, RoundTripPlainText) {
  const std::vector<std::string> texts = {
      "Hello world",
      " leading and trailing spaces  ",
      "Line one\nLine two\r\n\ttabbed\n\n\n",
      "int main() {\n    return 0; // comment\n}\n",
      "Ünïcödé: 日本語のテキスト, русский текст, العربية, हिन्दी, 한국어",
      "Emoji: 🦙🚀😶‍🌫️ and flags 🇩🇪, symbols ∑∫√ ½ ¾",
      "Numbers 3.14159 1,000,000 and 0x1F 1e-9",
      "'s 't 're 've 'm 'll 'd 'S 'T CAPS'LL",
      "   \u00A0\u2003\u3000 unusual spaces",
      std::string("nul\0byte inside", 15),
  };
  for (const char* name : kVocabs) {
    Loaded l = load(name);
    ASSERT_TRUE(l.tok);
    for (const std::string& t : texts) {
      const auto ids = l.tok->encode(t, false, false);
      EXPECT_EQ(l.tok->decode(ids), t) << name;
      // The same through the stream decoder (it never strips the space prefix).
      StreamDecoder sd(*l.tok);
      std::string streamed;
      for (TokenId id : ids) streamed += sd.push(id);
      streamed += sd.flush();
      std::string pieces;
      for (TokenId id : ids) pieces += l.tok->token_to_piece(id);
      EXPECT_EQ(streamed, pieces) << name;
    }
  }
}

TEST(Tokenizer, ParseSpecial) {
  Loaded phi3 = load("phi-3");
  ASSERT_TRUE(phi3.tok);
  const std::string chat = "<|user|>\nHi<|end|>\n<|assistant|>";
  const auto parsed = phi3.tok->encode(chat, false, true);
  ASSERT_GE(parsed.size(), 4u);
  EXPECT_EQ(parsed.front(), 32010);  // <|user|>
  EXPECT_EQ(parsed.back(), 32001);   // <|assistant|>
  EXPECT_NE(std::find(parsed.begin(), parsed.end(), 32007), parsed.end());  // <|end|>
  // phi-3's special tokens strip the whitespace after them (llama.cpp sets rstrip by
  // model name), so the "\n" after <|user|> is gone and "Hi" gets the space prefix.
  EXPECT_EQ(parsed[1], phi3.tok->encode("Hi", false, false)[0]);
  // Without parse_special, control-token text is plain text.
  const auto plain = phi3.tok->encode(chat, false, false);
  for (TokenId id : plain) EXPECT_NE(phi3.tok->token_type(id), TokenType::kControl);
  EXPECT_EQ(phi3.tok->decode(plain), chat);
  // Rendering the special tokens gives the text back.
  EXPECT_EQ(phi3.tok->decode(parsed, true).substr(0, 8), "<|user|>");

  Loaded gpt2 = load("gpt-2");
  ASSERT_TRUE(gpt2.tok);
  const auto g = gpt2.tok->encode("a<|endoftext|>b", false, true);
  EXPECT_EQ(g, (std::vector<TokenId>{64, 50256, 65}));
  const auto gp = gpt2.tok->encode("a<|endoftext|>b", false, false);
  EXPECT_EQ(std::count(gp.begin(), gp.end(), 50256), 0);
  EXPECT_EQ(gpt2.tok->decode(gp), "a<|endoftext|>b");
  EXPECT_EQ(gpt2.tok->decode(g), "ab");
  EXPECT_EQ(gpt2.tok->decode(g, true), "a<|endoftext|>b");

  // Longest match first: "<fim_prefix>" is not broken up by shorter specials.
  Loaded sc = load("starcoder");
  ASSERT_TRUE(sc.tok);
  EXPECT_EQ(sc.tok->encode("<fim_prefix><fim_suffix>x<fim_middle>", false, true).front(), 1);
}

// User-defined tokens are split out even without parse_special (HuggingFace's added
// tokens; llama.cpp does the same and the golden files rely on it).
TEST(Tokenizer, UserDefinedAlwaysSplit) {
  Loaded ds = load("deepseek-coder");
  ASSERT_TRUE(ds.tok);
  const TokenId user = *ds.tok->find_token("<|User|>");
  EXPECT_EQ(ds.tok->token_type(user), TokenType::kUserDefined);
  for (bool parse : {false, true}) {
    const auto ids = ds.tok->encode("Hi <|User|> there", false, parse);
    EXPECT_NE(std::find(ids.begin(), ids.end(), user), ids.end());
    EXPECT_EQ(ds.tok->decode(ids), "Hi <|User|> there");
  }
}

// Whether every byte has a plain token: <0xXX> byte tokens (SPM), or its byte-level
// character as a normal token (BPE). Not so for starcoder and falcon (no tokens for some
// bytes, e.g. 0xC0, 0xC1, 0xF5..0xFF, which UTF-8 never uses, and for falcon also a few
// control characters: llama.cpp drops such bytes, and so do we) and deepseek-coder (some
// byte characters are user-defined tokens, which llama.cpp renders as their text).
bool all_bytes_plain(const Tokenizer& t) {
  for (int b = 0; b < 256; ++b) {
    std::string s;
    if (t.kind() == VocabKind::kSpm) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
      s = hex;
    } else {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      int cp = b;
      if (!printable) {
        cp = 256;
        for (int x = 0; x < b; ++x)
          if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++cp;
      }
      utf8::append_cp(s, uint32_t(cp));
    }
    const auto id = t.find_token(s);
    if (!id) return false;
    const TokenType ty = t.token_type(*id);
    if (ty != (t.kind() == VocabKind::kSpm ? TokenType::kByte : TokenType::kNormal)) return false;
  }
  return true;
}

TEST(Tokenizer, InvalidUtf8) {
  int exact = 0;
  const std::vector<std::string> inputs = {
      "\xFF", "\xC3", "abc\xFF\xFE def", "\xC3\x28 \xE2\x82 x \xF0\x9F\x98", "\xED\xA0\x80 surrogate",
      "\xC0\xAF overlong", "ok \xF4\x90\x80\x80 above max", "\xE2\x82", std::string(64, '\x80'),
      "emoji cut \xF0\x9F", "<|endoftext|\xFF>"};
  for (const char* name : kVocabs) {
    Loaded l = load(name);
    ASSERT_TRUE(l.tok);
    for (const std::string& in : inputs) {
      for (bool parse : {false, true}) {
        const auto a = l.tok->encode(in, false, parse);
        const auto b = l.tok->encode(in, false, parse);
        EXPECT_EQ(a, b) << name;  // deterministic
        for (TokenId id : a) EXPECT_TRUE(l.tok->is_valid(id)) << name;
        // Byte fallback (SPM) and byte-level BPE keep every byte the vocabulary can spell
        // (see all_bytes_plain).
        if (all_bytes_plain(*l.tok)) {
          EXPECT_EQ(l.tok->decode(a), in) << name;
        }
        // The stream decoder turns what cannot be a character into U+FFFD: valid output.
        StreamDecoder sd(*l.tok);
        std::string s;
        for (TokenId id : a) s += sd.push(id);
        s += sd.flush();
        EXPECT_TRUE(utf8::is_valid(s)) << name;
      }
    }
    exact += all_bytes_plain(*l.tok);
  }
  EXPECT_EQ(exact, 3);  // llama-spm, phi-3, gpt-2
}

// Random mixes of words, special-token texts (whole and cut), multi-byte characters (whole
// and cut) and raw bytes: never a crash, valid ids, the same ids every time.
TEST(Tokenizer, RandomInputs) {
  const std::vector<std::string> parts = {
      "Hello", " world", "<|endoftext|>", "<|end", "<s>", "</s>", "<|user|>", "<fim_prefix>", "<|User|>",
      "\xC3\xA9", "\xF0\x9F\xA6\x99", "\xF0\x9F", "\xE6\x88\x91", " ", "  ", "\n", "\t", "\r\n", "123",
      "'s", "\xE2\x96\x81", "\xC2\xA0", "\xFF", "\x80", "\x00", "!!", "...", "\xC3\xBF"};
  std::mt19937 rng(1234);
  for (const char* name : kVocabs) {
    Loaded l = load(name);
    ASSERT_TRUE(l.tok);
    for (int iter = 0; iter < 300; ++iter) {
      std::string in;
      const int n = int(rng() % 12);
      for (int i = 0; i < n; ++i) in += parts[rng() % parts.size()];
      const bool parse = rng() % 2, add = rng() % 2;
      const auto a = l.tok->encode(in, add, parse);
      EXPECT_EQ(a, l.tok->encode(in, add, parse)) << name;
      for (TokenId id : a) ASSERT_TRUE(l.tok->is_valid(id)) << name;
      // Not round trips by design: SPM reads a literal "▁" as a space, and phi-3's "</s>"
      // (user-defined, always split) eats the whitespace after it.
      const bool lossy = in.find("\xE2\x96\x81") != std::string::npos || in.find("</s>") != std::string::npos;
      if (!add && !parse && !lossy && utf8::is_valid(in) && all_bytes_plain(*l.tok)) {
        EXPECT_EQ(l.tok->decode(a), in) << name;
      }
      StreamDecoder sd(*l.tok, parse);
      std::string out;
      for (TokenId id : a) out += sd.push(id);
      out += sd.flush();
      EXPECT_TRUE(utf8::is_valid(out)) << name;
    }
  }
}

TEST(Tokenizer, LongAndRepetitiveInput) {
  const std::vector<std::string> inputs = {std::string(200000, ' '), std::string(200000, 'a'),
                                           std::string(100000, '\n'), std::string(50000, '7'),
                                           [] {
                                             std::string s;
                                             for (int i = 0; i < 20000; ++i) s += "<|im_start|>\t ";
                                             return s;
                                           }()};
  for (const char* name : kVocabs) {
    Loaded l = load(name);
    ASSERT_TRUE(l.tok);
    for (const std::string& in : inputs) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = l.tok->encode(in, false, true);
      const double ms = ms_since(t0);
      EXPECT_FALSE(ids.empty());
      EXPECT_EQ(l.tok->decode(ids), in) << name;
      if (ms > 200) std::printf("[slow] %s: %zu bytes in %.1f ms\n", name, in.size(), ms);
    }
  }
}

// Everything is copied out of the file: the tokenizer works after the File is gone.
TEST(Tokenizer, OutlivesItsFile) {
  for (const char* name : {"llama-spm", "gpt-2"}) {
    std::unique_ptr<Tokenizer> tok;
    {
      Loaded l = load(name);
      ASSERT_TRUE(l.tok);
      tok = std::move(l.tok);
    }
    const auto ids = tok->encode("Hello world <|endoftext|>", true, true);
    EXPECT_EQ(tok->decode(ids).find("Hello world"), tok->kind() == VocabKind::kSpm ? 1u : 0u) << name;
  }
}

TEST(Tokenizer, InvalidIds) {
  Loaded l = load("gpt-2");
  ASSERT_TRUE(l.tok);
  for (TokenId id : {-5, -1, l.tok->n_vocab(), 1 << 30}) {
    EXPECT_EQ(l.tok->token_to_piece(id, true), "");
    EXPECT_EQ(l.tok->token_text(id), "");
    EXPECT_EQ(l.tok->token_type(id), TokenType::kUndefined);
    EXPECT_FALSE(l.tok->is_eog(id));
  }
  const std::vector<TokenId> ids = {-1, 15496, 1 << 30};
  EXPECT_EQ(l.tok->decode(ids), "Hello");
}

// ---------------------------------------------------------------------------------------
// Streaming

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  Loaded spm = load("llama-spm");
  ASSERT_TRUE(spm.tok);
  // 🦙 has no token: byte fallback gives four byte tokens (the golden "this is 🦙.cpp").
  const auto ids = spm.tok->encode("🦙!", false, false);
  ASSERT_EQ(ids.size(), 6u);  // ▁, four bytes, !
  StreamDecoder sd(*spm.tok);
  EXPECT_EQ(sd.push(ids[0]), " ");
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.push(ids[2]), "");
  EXPECT_EQ(sd.push(ids[3]), "");
  EXPECT_EQ(sd.pending_bytes(), 3u);
  EXPECT_EQ(sd.push(ids[4]), "🦙");
  EXPECT_EQ(sd.push(ids[5]), "!");
  EXPECT_EQ(sd.flush(), "");

  // Cut off: the unfinished character becomes U+FFFD at flush.
  StreamDecoder cut(*spm.tok);
  std::string s = cut.push(ids[0]);
  s += cut.push(ids[1]);
  s += cut.push(ids[2]);
  EXPECT_EQ(s, " ");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  // A character interrupted by another one: the broken start is U+FFFD, at once.
  StreamDecoder mixed(*spm.tok);
  EXPECT_EQ(mixed.push(ids[1]), "");
  EXPECT_EQ(mixed.push(ids[5]), "\xEF\xBF\xBD!");
}

TEST(StreamDecoder, ByteLevelPiecesSplitCharacters) {
  Loaded gpt2 = load("gpt-2");
  ASSERT_TRUE(gpt2.tok);
  const std::string text = " 😶‍🌫️ 我想在apple工作";
  const auto ids = gpt2.tok->encode(text, false, false);
  StreamDecoder sd(*gpt2.tok);
  std::string out;
  bool held_back = false;
  for (TokenId id : ids) {
    const std::string piece = gpt2.tok->token_to_piece(id);
    const std::string got = sd.push(id);
    EXPECT_TRUE(utf8::is_valid(got));
    if (got.size() != piece.size()) held_back = true;
    out += got;
  }
  out += sd.flush();
  EXPECT_TRUE(held_back) << "expected at least one token ending inside a character";
  EXPECT_EQ(out, text);
}

TEST(StreamDecoder, PushBytes) {
  Loaded spm = load("llama-spm");
  ASSERT_TRUE(spm.tok);
  StreamDecoder sd(*spm.tok);
  EXPECT_EQ(sd.push_bytes("a\xE2"), "a");
  EXPECT_EQ(sd.push_bytes("\x82"), "");
  EXPECT_EQ(sd.push_bytes("\xAC" "b"), "\xE2\x82\xAC" "b");  // €
  EXPECT_EQ(sd.push_bytes("\xFF"), "\xEF\xBF\xBD");
  EXPECT_EQ(sd.flush(), "");
}

// ---------------------------------------------------------------------------------------
// stories260K: the prompt ids and completion text the llama.cpp server produced.

TEST(Tokenizer, Stories260KMatchesLlamaCppServer) {
  auto f = gguf::File::open(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  auto tok = Tokenizer::from_gguf(**f);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  std::ifstream in(std::string(TS_SHARED_DIR) + "/testdata/stories260K_greedy.json");
  ASSERT_TRUE(in.good());
  const auto j = nlohmann::json::parse(in);
  int n = 0;
  for (const auto& c : j.at("cases")) {
    const std::string prompt = c.at("prompt");
    const auto want = c.at("prompt_tokens").get<std::vector<TokenId>>();
    EXPECT_EQ((*tok)->encode(prompt, true, false), want) << prompt;
    // The server streams token_to_piece of each completion token, with no stripping.
    const auto completion = c.at("completion_tokens").get<std::vector<TokenId>>();
    StreamDecoder sd(**tok);
    std::string text;
    for (TokenId id : completion) text += sd.push(id);
    text += sd.flush();
    EXPECT_EQ(text, c.at("completion_text").get<std::string>()) << prompt;
    ++n;
  }
  EXPECT_EQ(n, 8);
}

// ---------------------------------------------------------------------------------------
// Hand-made vocabularies

TEST(Synthetic, GemmaStyleSpm) {
  Synthetic s = parse_writer(gemma_like_writer());
  ASSERT_TRUE(s.file);
  auto r = Tokenizer::from_gguf(*s.file);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Tokenizer& t = **r;
  EXPECT_FALSE(t.add_space_prefix());
  EXPECT_EQ(t.bos_id(), 2);
  const TokenId sot = *t.find_token("<start_of_turn>"), eot = *t.find_token("<end_of_turn>");
  EXPECT_EQ(t.eot_id(), eot);
  EXPECT_TRUE(t.is_eog(eot));
  EXPECT_TRUE(t.is_eog(1));
  EXPECT_FALSE(t.is_eog(sot));

  const TokenId hello = *t.find_token("Hello"), world = *t.find_token("\xE2\x96\x81world");
  const TokenId user = *t.find_token("user"), nl = *t.find_token("<0x0A>");
  // No dummy prefix: "Hello world" -> Hello ▁world.
  EXPECT_EQ(t.encode("Hello world", false, false), (std::vector<TokenId>{hello, world}));
  EXPECT_EQ(t.encode("Hello world", true, false), (std::vector<TokenId>{2, hello, world}));
  EXPECT_EQ(t.decode(t.encode("Hello world", false, false)), "Hello world");

  const std::string chat = "<start_of_turn>user\nHello world<end_of_turn>\n";
  EXPECT_EQ(t.encode(chat, true, true), (std::vector<TokenId>{2, sot, user, nl, hello, world, eot, nl}));
  const auto plain = t.encode(chat, true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), sot), 0);
  EXPECT_EQ(t.decode(plain), chat);
  // The user-defined "<html>" is split out even without parse_special.
  const TokenId html = *t.find_token("<html>");
  EXPECT_EQ(t.encode("Hello<html>", false, false), (std::vector<TokenId>{hello, html}));

  // Unknown characters fall back to bytes; the stream decoder joins them.
  const auto emoji = t.encode("😀", false, false);
  ASSERT_EQ(emoji.size(), 4u);
  StreamDecoder sd(t);
  std::string out;
  for (TokenId id : emoji) out += sd.push(id);
  EXPECT_EQ(out, "😀");
}

TEST(Synthetic, Llama3AndQwen2Bpe) {
  for (const char* pre : {"llama-bpe", "llama3", "qwen2", "default", "gpt2"}) {
    Synthetic s = parse_writer(bpe_writer(pre));
    ASSERT_TRUE(s.file);
    auto r = Tokenizer::from_gguf(*s.file);
    ASSERT_TRUE(r.is_ok()) << pre << ": " << r.status().to_string();
    const Tokenizer& t = **r;
    const bool llama3 = std::string(pre).rfind("llama", 0) == 0;
    EXPECT_EQ(t.add_bos(), llama3) << pre;  // llama3 family adds BOS by default

    const TokenId hello = *t.find_token("hello"), world = *t.find_token("\xC4\xA0world");
    const TokenId im_start = *t.find_token("<|im_start|>"), im_end = *t.find_token("<|im_end|>");
    const auto ids = t.encode("hello world", false, false);
    EXPECT_EQ(ids, (std::vector<TokenId>{hello, world})) << pre;

    // Digits: llama3 groups three, qwen2 one, gpt2 all.
    const auto digits = t.encode("123123", false, false);
    const TokenId d123 = *t.find_token("123");
    if (llama3) {
      EXPECT_EQ(digits, (std::vector<TokenId>{d123, d123})) << pre;
    } else if (std::string(pre) == "qwen2") {
      EXPECT_EQ(digits.size(), 6u) << pre;
    } else {
      EXPECT_EQ(digits.size(), 2u) << pre;  // "123123" is one piece: 123 + 123 by merges
    }

    const auto chat = t.encode("<|im_start|>hello<|im_end|>", true, true);
    std::vector<TokenId> want = {im_start, hello, im_end};
    if (llama3) want.insert(want.begin(), t.bos_id());
    EXPECT_EQ(chat, want) << pre;
    EXPECT_TRUE(t.is_eog(im_end));
    EXPECT_TRUE(t.is_eog(*t.find_token("<|eot_id|>")));
    EXPECT_TRUE(t.is_eog(t.eos_id()));
    EXPECT_EQ(t.decode(chat, true), std::string(llama3 ? "<|begin_of_text|>" : "") + "<|im_start|>hello<|im_end|>");
    EXPECT_EQ(t.decode(t.encode("Ünïcödé 🚀\n\n x", false, false)), "Ünïcödé 🚀\n\n x");
  }
}

TEST(Synthetic, LoadErrors) {
  {
    gguf::Writer w = bpe_writer("no-such-pre");
    Synthetic s = parse_writer(w);
    auto r = Tokenizer::from_gguf(*s.file);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(r.status().message().find("no-such-pre"), std::string::npos);
  }
  {
    gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "t5");
    w.add_string_array("tokenizer.ggml.tokens", {"a"});
    Synthetic s = parse_writer(w);
    auto r = Tokenizer::from_gguf(*s.file);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  }
  {
    gguf::Writer w;
    w.add_string_array("tokenizer.ggml.tokens", {"a"});
    Synthetic s = parse_writer(w);
    auto r = Tokenizer::from_gguf(*s.file);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  }
  {
    gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
    w.add_f32_array("tokenizer.ggml.scores", {0.0f});
    Synthetic s = parse_writer(w);
    auto r = Tokenizer::from_gguf(*s.file);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
  {
    gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
    w.add_string("tokenizer.ggml.token_type", "not an array");
    Synthetic s = parse_writer(w);
    auto r = Tokenizer::from_gguf(*s.file);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
  {
    gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "gpt-2");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b"});
    Synthetic s = parse_writer(w);
    auto r = Tokenizer::from_gguf(*s.file);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kNotFound);  // no merges
  }
  {
    // Special ids out of range are ignored (llama.cpp keeps its default); a vocabulary too
    // small for the defaults has no BOS then.
    gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_string_array("tokenizer.ggml.tokens", {"<unk>", "a"});
    w.add_u32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
    w.add_u32("tokenizer.ggml.eos_token_id", 99);
    Synthetic s = parse_writer(w);
    auto r = Tokenizer::from_gguf(*s.file);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ((*r)->bos_id(), 1);  // the SPM default, which exists here
    EXPECT_EQ((*r)->eos_id(), kNoToken);
    EXPECT_EQ((*r)->encode("a", true, false).front(), 1);
  }
}

// ---------------------------------------------------------------------------------------
// Timing (printed, not asserted)

TEST(Timing, LoadVocabularies) {
  for (const char* name : kVocabs) {
    auto t0 = std::chrono::steady_clock::now();
    auto f = gguf::File::open(kDir + "ggml-vocab-" + name + ".gguf");
    ASSERT_TRUE(f.is_ok());
    const double open_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    auto tok = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(tok.is_ok());
    std::printf("[timing] %-15s n_vocab %6d: gguf open %.2f ms, tokenizer %.2f ms\n", name,
                (*tok)->n_vocab(), open_ms, ms_since(t0));
  }
}

// A Gemma-3-sized SPM vocabulary (262,144 tokens, 6,400 control/user-defined tokens).
TEST(Timing, LoadGemmaSizedVocabulary) {
  constexpr int kN = 262144;
  std::vector<std::string> toks;
  std::vector<float> scores;
  std::vector<int32_t> types;
  toks.reserve(kN);
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"}) {
    toks.push_back(s);
    types.push_back(std::string(s) == "<unk>" ? kUnknown : kControl);
  }
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    toks.push_back(hex);
    types.push_back(kByte);
  }
  for (int i = 0; i < 6400; ++i) {
    toks.push_back("<unused" + std::to_string(i) + ">");
    types.push_back(i % 2 ? kUserDefined : kControl);
  }
  const char* alphabet = "abcdefghijklmnopqrstuvwxyz";
  for (int i = 0; int(toks.size()) < kN; ++i) {
    std::string s = (i % 3 == 0) ? "\xE2\x96\x81" : "";
    for (int x = i + 1; x > 0; x /= 26) s += alphabet[x % 26];
    toks.push_back(s);
    types.push_back(kNormal);
  }
  for (int i = 0; i < kN; ++i) scores.push_back(-float(i));
  gguf::Writer w;
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_bool("tokenizer.ggml.add_space_prefix", false);
  auto t0 = std::chrono::steady_clock::now();
  Synthetic s = parse_writer(w);
  ASSERT_TRUE(s.file);
  const double parse_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  auto tok = Tokenizer::from_gguf(*s.file);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const double load_ms = ms_since(t0);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "the quick brown fox <start_of_turn> jumps over the lazy dog\n";
  t0 = std::chrono::steady_clock::now();
  const auto ids = (*tok)->encode(text, true, true);
  std::printf("[timing] gemma-sized SPM n_vocab %d: gguf parse %.2f ms, tokenizer %.2f ms; encode %zu bytes -> %zu ids in %.2f ms\n",
              (*tok)->n_vocab(), parse_ms, load_ms, text.size(), ids.size(), ms_since(t0));
}

TEST(Timing, EncodeThroughput) {
  std::string text;
  for (int i = 0; i < 500; ++i)
    text += "The quick brown fox jumps over the lazy dog. Ünïcödé 日本語 🦙 3.14159 it's\n\tcode() {}\n";
  for (const char* name : kVocabs) {
    Loaded l = load(name);
    ASSERT_TRUE(l.tok);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = l.tok->encode(text, false, false);
    const double ms = ms_since(t0);
    std::printf("[timing] %-15s encode %zu bytes -> %zu ids: %.2f ms (%.1f MB/s)\n", name, text.size(),
                ids.size(), ms, text.size() / 1e3 / ms);
  }
}

}  // namespace
}  // namespace ts::tok
