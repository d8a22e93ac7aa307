// UTF-8 validation (keys and tensor names) and message escaping.
#include <gtest/gtest.h>

#include "utf8.h"

namespace ts::gguf {
namespace {

TEST(GgufUtf8, AcceptsWellFormed) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("blk.0.attn_q.weight"));
  EXPECT_TRUE(is_valid_utf8("\xc2\x80"));              // U+0080, smallest 2-byte
  EXPECT_TRUE(is_valid_utf8("\xdf\xbf"));              // U+07FF
  EXPECT_TRUE(is_valid_utf8("\xe0\xa0\x80"));          // U+0800, smallest 3-byte
  EXPECT_TRUE(is_valid_utf8("\xed\x9f\xbf"));          // U+D7FF, just below the surrogates
  EXPECT_TRUE(is_valid_utf8("\xee\x80\x80"));          // U+E000, just above
  EXPECT_TRUE(is_valid_utf8("\xef\xbf\xbf"));          // U+FFFF
  EXPECT_TRUE(is_valid_utf8("\xf0\x90\x80\x80"));      // U+10000
  EXPECT_TRUE(is_valid_utf8("\xf4\x8f\xbf\xbf"));      // U+10FFFF, the last code point
  EXPECT_TRUE(is_valid_utf8("\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80"));
  EXPECT_TRUE(is_valid_utf8(std::string_view("a\0b", 3)));  // NUL is valid UTF-8
}

TEST(GgufUtf8, RejectsMalformedAndReportsTheOffset) {
  struct Case {
    const char* s;
    size_t bad;
  };
  const Case cases[] = {
      {"\x80", 0},                  // lone continuation byte
      {"ab\xbf", 2},                // continuation after ASCII
      {"\xc0\xaf", 0},              // overlong '/'
      {"\xc1\xbf", 0},              // overlong
      {"\xe0\x80\xaf", 0},          // overlong 3-byte
      {"\xe0\x9f\xbf", 0},          // overlong U+07FF
      {"\xf0\x8f\xbf\xbf", 0},      // overlong 4-byte
      {"x\xed\xa0\x80", 1},         // surrogate U+D800
      {"\xed\xbf\xbf", 0},          // surrogate U+DFFF
      {"\xf4\x90\x80\x80", 0},      // U+110000
      {"\xf5\x80\x80\x80", 0},      // lead byte above F4
      {"\xff", 0},
      {"\xfe", 0},
      {"abc\xc3", 3},               // truncated 2-byte
      {"\xe2\x82", 0},              // truncated 3-byte
      {"\xf0\x9f\x98", 0},          // truncated 4-byte
      {"\xc3(", 0},                 // bad continuation
      {"ok\xe2\x28\xa1", 2},        // bad second byte
      {"\xe2\x82\x28", 0},          // bad third byte
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(std::string(c.s)));
    size_t bad = 99;
    EXPECT_FALSE(is_valid_utf8(c.s, &bad));
    EXPECT_EQ(bad, c.bad);
  }
}

TEST(GgufUtf8, EscapeForMessage) {
  EXPECT_EQ(escape_for_message("token_embd.weight"), "token_embd.weight");
  EXPECT_EQ(escape_for_message("a\nb"), "a\\x0ab");
  EXPECT_EQ(escape_for_message("it's"), "it\\x27s");
  EXPECT_EQ(escape_for_message("gen\xffral"), "gen\\xffral");
  EXPECT_EQ(escape_for_message("\xe2\x82\xac"), "\xe2\x82\xac");  // valid multi-byte kept
  EXPECT_EQ(escape_for_message("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(escape_for_message(std::string(100, 'x'), 10), "xxxxxxxxxx...");
  // A sequence cut by the limit is escaped, not split.
  EXPECT_EQ(escape_for_message("ab\xe2\x82\xac", 4), "ab\\xe2\\x82...");
}

}  // namespace
}  // namespace ts::gguf
