// Log lines: the RFC 3339 timestamp, text and JSON formats, quoting and escaping.
#include "core/log.h"

#include <gtest/gtest.h>

#include <regex>

namespace ts {
namespace {

TEST(Log, Rfc3339WithMilliseconds) {
  EXPECT_TRUE(std::regex_match(rfc3339_now_ms(), std::regex(R"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)")))
      << rfc3339_now_ms();
}

TEST(Log, TextLine) {
  EXPECT_EQ(format_log_line(LogFormat::kText, "2026-12-01T00:00:00.000Z", LogLevel::kInfo, "access",
                            {{"request_id", "abc"}, {"route", "POST /v1/completions"}, {"status", 200},
                             {"queue_ms", 1.5}, {"key", ""}}),
            "2026-12-01T00:00:00.000Z info access request_id=abc route=\"POST /v1/completions\" status=200 "
            "queue_ms=1.500 key=\"\"");
  // A message never spans lines; a value's control characters are escaped.
  EXPECT_EQ(format_log_line(LogFormat::kText, "T", LogLevel::kWarn, "two\nlines", {{"v", "a\nb"}}),
            "T warn two lines v=\"a\\nb\"");
}

TEST(Log, JsonLine) {
  EXPECT_EQ(format_log_line(LogFormat::kJson, "2026-12-01T00:00:00.000Z", LogLevel::kError, "said \"hi\"",
                            {{"status", 503}, {"route", "GET /x"}, {"ctl", std::string("\x01", 1)}}),
            "{\"ts\":\"2026-12-01T00:00:00.000Z\",\"level\":\"error\",\"msg\":\"said \\\"hi\\\"\",\"status\":503,"
            "\"route\":\"GET /x\",\"ctl\":\"\\u0001\"}");
}

}  // namespace
}  // namespace ts
