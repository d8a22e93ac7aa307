// The pre-tokenizer regexes, piece by piece, and the UTF-8 scanner they rely on.
#include "pretokenizer.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "byte_level.h"
#include "core/utf8.h"

namespace ts::tok::detail {
namespace {

std::vector<std::string> split(std::string_view pre, std::string_view text) {
  const PreTokenizerSpec* spec = find_pre_tokenizer(pre);
  EXPECT_NE(spec, nullptr) << pre;
  if (spec == nullptr) return {};
  auto p = PreTokenizer::create(*spec);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  std::vector<std::string_view> pieces;
  (*p)->split(text, pieces);
  std::string joined;
  for (auto s : pieces) joined += s;
  EXPECT_EQ(joined, text) << "pieces must cover the text";
  return {pieces.begin(), pieces.end()};
}

using V = std::vector<std::string>;

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world, it's 2024!!"),
            (V{"Hello", " world", ",", " it", "'s", " 2024", "!!"}));
  // \s+(?!\S): a run of spaces leaves its last space to the next word.
  EXPECT_EQ(split("gpt2", "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(split("gpt2", "a\t\tb \n"), (V{"a", "\t", "\t", "b", " \n"}));
  EXPECT_EQ(split("gpt2", "x 🦙"), (V{"x", " 🦙"}));
  EXPECT_EQ(split("default", "x 1"), (V{"x", " 1"}));
  EXPECT_EQ(split("", "x 1"), (V{"x", " 1"}));
}

TEST(PreTokenizer, Llama3AndQwen2) {
  EXPECT_EQ(split("llama-bpe", "I'LL pay 1234567 now\n\n  ok"),
            (V{"I", "'LL", " pay", " ", "123", "456", "7", " now", "\n\n", " ", " ok"}));
  EXPECT_EQ(split("qwen2", "pay 1234"), (V{"pay", " ", "1", "2", "3", "4"}));
  EXPECT_EQ(split("llama3", "(hello)"), (V{"(hello", ")"}));
}

TEST(PreTokenizer, DigitsAndPunctuationFamilies) {
  EXPECT_EQ(split("starcoder", "x 123"), (V{"x", " ", "1", "2", "3"}));
  // Falcon: punctuation runs first, then GPT-2's regex, then digit triples.
  EXPECT_EQ(split("falcon", "a+=b 12345"), (V{"a", "+=", "b", " ", "123", "45"}));
  EXPECT_EQ(split("deepseek-coder", "foo.bar 12\n我想"), (V{"foo", ".", "bar", " ", "1", "2", "\n", "我想"}));
}

// Unicode White_Space as llama.cpp has it: NBSP is space, U+180E is not.
TEST(PreTokenizer, WhiteSpaceClass) {
  EXPECT_EQ(split("gpt2", "a\u00A0\u00A0b"), (V{"a", "\u00A0", "\u00A0", "b"}));
  EXPECT_EQ(split("gpt2", "!\u00A0"), (V{"!", "\u00A0"}));
  EXPECT_EQ(split("gpt2", "!\u180E"), (V{"!\u180E"}));  // PCRE2's own \s would split here
}

TEST(PreTokenizer, InvalidUtf8IsABarrier) {
  EXPECT_EQ(split("gpt2", "ab\xFF" "cd"), (V{"ab", "\xFF", "cd"}));
  EXPECT_EQ(split("gpt2", "\xE2\x82 x"), (V{"\xE2\x82", " x"}));
  EXPECT_EQ(split("llama3", "\xC3"), (V{"\xC3"}));
}

TEST(PreTokenizer, UnknownNames) {
  EXPECT_EQ(find_pre_tokenizer("no-such-pre"), nullptr);
  EXPECT_EQ(find_pre_tokenizer("GPT2"), nullptr);  // names are exact
  EXPECT_TRUE(find_pre_tokenizer("llama3")->ignore_merges);
  EXPECT_TRUE(find_pre_tokenizer("llama-bpe")->add_bos);
  EXPECT_FALSE(find_pre_tokenizer("qwen2")->add_bos);
}

TEST(PreTokenizer, TranslateRegex) {
  auto r = translate_regex(R"(\s+(?!\S)|[^\s\p{L}])");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->find("\\s"), std::string::npos);
  EXPECT_EQ(r->find("\\S"), std::string::npos);
  EXPECT_NE(r->find("[^\\t-\\r "), std::string::npos);
  EXPECT_FALSE(translate_regex(R"([\S])").is_ok());
  EXPECT_FALSE(translate_regex(R"([abc)").is_ok());
  EXPECT_EQ(*translate_regex(R"(\\s)"), R"(\\s)");  // an escaped backslash, then 's'
}

TEST(ByteLevel, RoundTrip) {
  const ByteLevel& bl = ByteLevel::get();
  EXPECT_EQ(bl.encode(' '), "\xC4\xA0");  // Ġ
  EXPECT_EQ(bl.encode('\n'), "\xC4\x8A");  // Ċ
  EXPECT_EQ(bl.encode('a'), "a");
  EXPECT_EQ(bl.encode(0xAD), "\xC5\x83");  // the last remapped byte: U+0143
  std::string all, enc, dec;
  for (int b = 0; b < 256; ++b) all += char(b);
  bl.encode_append(all, enc);
  bl.decode_append(enc, dec);
  EXPECT_EQ(dec, all);
  dec.clear();
  bl.decode_append("\xE4\xBD\xA0", dec);  // not in the alphabet: copied
  EXPECT_EQ(dec, "\xE4\xBD\xA0");
}

TEST(Utf8Scan, Classifies) {
  using utf8::Scan;
  auto st = [](std::string_view s) { return utf8::scan(s, 0); };
  EXPECT_EQ(st("a").status, Scan::kOk);
  EXPECT_EQ(st("\xC3\xA9").len, 2u);
  EXPECT_EQ(st("\xF0\x9F\xA6\x99").cp, 0x1F999u);
  EXPECT_EQ(st("\xF0\x9F\xA6").status, Scan::kIncomplete);
  EXPECT_EQ(st("\xF0\x9F" "a").status, Scan::kInvalid);
  EXPECT_EQ(st("\xF0\x9F" "a").len, 2u);  // the maximal ill-formed subpart
  EXPECT_EQ(st("\x80").status, Scan::kInvalid);
  EXPECT_EQ(st("\xC0\xAF").status, Scan::kInvalid);      // overlong
  EXPECT_EQ(st("\xED\xA0\x80").status, Scan::kInvalid);  // surrogate
  EXPECT_EQ(st("\xF4\x90\x80\x80").status, Scan::kInvalid);  // above U+10FFFF
  EXPECT_EQ(st("\xE0\x80\x80").status, Scan::kInvalid);
  EXPECT_TRUE(utf8::is_valid("héllo 🦙"));
  EXPECT_FALSE(utf8::is_valid("h\xE9llo"));
}

}  // namespace
}  // namespace ts::tok::detail
