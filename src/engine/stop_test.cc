#include "engine/stop.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ts::engine {
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

}  // namespace
}  // namespace ts::engine
