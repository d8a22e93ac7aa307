#include "tokenizer/text_output.h"

#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace ts::tok {
namespace {

TEST(StopStrings, NoStops) {
  std::vector<std::string> stops;
  auto c = check_stop("hello", stops);
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.end, 5u);
}

TEST(StopStrings, FindsEarliest) {
  std::vector<std::string> stops = {"world", "lo w"};
  auto c = check_stop("hello world!", stops);
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.end, 3u);  // "hel"
}

TEST(StopStrings, HoldsBackPartialMatch) {
  std::vector<std::string> stops = {"</end>"};
  auto c = check_stop("text </e", stops);
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.end, 5u);  // "text " is safe, "</e" may become the stop string
  c = check_stop("text <x", stops);
  EXPECT_EQ(c.end, 7u);
}

TEST(StopStrings, IncrementalSearchFindsStraddlingMatch) {
  std::vector<std::string> stops = {"STOP"};
  std::string text = "abcST";
  auto c = check_stop(text, stops, 0);
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.end, 3u);
  const size_t checked = text.size();
  text += "OPxyz";
  c = check_stop(text, stops, checked);
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.end, 3u);
}

TEST(StopStrings, EmptyStopIgnored) {
  std::vector<std::string> stops = {"", "x"};
  auto c = check_stop("abc", stops);
  EXPECT_FALSE(c.stopped);
  EXPECT_EQ(c.end, 3u);
}

TEST(StopStrings, NewlineStop) {
  std::vector<std::string> stops = {"\n"};
  auto c = check_stop("line one\nline two", stops);
  EXPECT_TRUE(c.stopped);
  EXPECT_EQ(c.end, 8u);
}

// TextOutput over a real vocabulary (stories260K, SentencePiece with byte tokens).
class TextOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = gguf::File::open(std::string(TS_SHARED_DIR) + "/models/stories260K.gguf");
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    file_ = std::move(f).value();
    auto t = Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    tok_ = std::move(t).value();
  }
  std::vector<TokenId> ids(const std::string& text) const { return tok_->encode(text, false, false); }
  // Pushes every id; returns the shown text and the end reason of the last push.
  std::string push_all(TextOutput& out, const std::vector<TokenId>& toks, TextEnd* end) const {
    std::string shown;
    *end = TextEnd::kNone;
    for (TokenId t : toks) {
      shown += out.push(t, end);
      if (*end != TextEnd::kNone) break;
    }
    return shown;
  }
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(TextOutputTest, EndOfGenerationIsNotTextNorAToken) {
  TextOutput out(*tok_, {}, /*ignore_eos=*/false, /*max_tokens=*/100);
  std::vector<TokenId> toks = ids("Once upon a time");
  const TokenId eos = tok_->eos_id();
  ASSERT_TRUE(tok_->is_eog(eos));
  toks.push_back(eos);
  toks.push_back(toks[0]);  // never reached
  TextEnd end;
  const std::string shown = push_all(out, toks, &end);
  EXPECT_EQ(end, TextEnd::kEog);
  EXPECT_EQ(shown, out.shown());
  EXPECT_NE(shown.find("upon a time"), std::string::npos);
  EXPECT_EQ(out.n_tokens(), int64_t(toks.size()) - 2);
  EXPECT_TRUE(out.over());
  EXPECT_EQ(out.push(toks[0], &end), "");  // over: nothing more
  EXPECT_EQ(end, TextEnd::kNone);
}

TEST_F(TextOutputTest, IgnoreEosCountsItAsAToken) {
  TextOutput out(*tok_, {}, /*ignore_eos=*/true, /*max_tokens=*/3);
  TextEnd end;
  const std::vector<TokenId> toks = {ids("Once")[0], tok_->eos_id(), ids("Once")[0]};
  push_all(out, toks, &end);
  EXPECT_EQ(end, TextEnd::kLength);
  EXPECT_EQ(out.n_tokens(), 3);
}

TEST_F(TextOutputTest, StopStringCutsAndIsNeverShown) {
  TextOutput out(*tok_, {" a time"}, false, 0);
  TextEnd end;
  const std::string shown = push_all(out, ids("Once upon a time there was"), &end);
  EXPECT_EQ(end, TextEnd::kStopString);
  EXPECT_EQ(shown, out.shown());
  EXPECT_EQ(shown.find(" a time"), std::string::npos);
  EXPECT_NE(shown.find("upon"), std::string::npos);
  EXPECT_EQ(out.finish(), "");
}

TEST_F(TextOutputTest, LengthAndFinishFlushWhatWasHeldBack) {
  // " upon" could still become the stop string " upon a time": held back until the end.
  const std::vector<TokenId> toks = ids("Once upon");
  TextOutput plain(*tok_, {}, false, 0);
  TextEnd plain_end;
  std::string all = push_all(plain, toks, &plain_end);
  all += plain.finish();
  ASSERT_NE(all.find(" upon"), std::string::npos) << "[" << all << "]";
  {
    TextOutput out(*tok_, {" upon a time"}, false, int64_t(toks.size()));
    TextEnd end;
    const std::string shown = push_all(out, toks, &end);
    EXPECT_EQ(end, TextEnd::kLength);
    EXPECT_EQ(shown, all);
  }
  {
    TextOutput out(*tok_, {" upon a time"}, false, 0);
    TextEnd end;
    std::string shown = push_all(out, toks, &end);
    EXPECT_EQ(end, TextEnd::kNone);
    EXPECT_LT(shown.size(), all.size());
    shown += out.finish();  // e.g. the context is full
    EXPECT_EQ(shown, all);
    EXPECT_TRUE(out.over());
  }
}

}  // namespace
}  // namespace ts::tok
