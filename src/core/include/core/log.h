// Leveled logging to stderr, one line per record, each with an RFC 3339 UTC timestamp with
// milliseconds. Text ("2026-12-01T22:48:41.123Z info message key=value ...") or JSON lines
// ({"ts": ..., "level": ..., "msg": ..., "key": "value", ...}); `serve --log-format`.
// TIERSERVE_LOG=debug|info|warn|error sets the level. Thread-safe: a record is one write.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace ts {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class LogFormat { kText, kJson };

LogLevel log_level();
void set_log_level(LogLevel l);
LogFormat log_format();
void set_log_format(LogFormat f);

// One key/value of a record. Numbers are written bare in JSON; strings quoted (and, in
// text, quoted when they hold a space, a quote or '='). Control characters are escaped.
struct LogField {
  std::string key;
  std::string value;
  bool number = false;

  LogField(std::string k, std::string v) : key(std::move(k)), value(std::move(v)) {}
  LogField(std::string k, const char* v) : key(std::move(k)), value(v ? v : "") {}
  LogField(std::string k, int64_t v) : key(std::move(k)), value(std::to_string(v)), number(true) {}
  LogField(std::string k, int v) : key(std::move(k)), value(std::to_string(v)), number(true) {}
  LogField(std::string k, double v);
};

// Writes one record (when l is at or above the level).
void log_record(LogLevel l, std::string_view msg, const std::vector<LogField>& fields = {});
void log_printf(LogLevel l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The time now as "YYYY-MM-DDTHH:MM:SS.mmmZ".
std::string rfc3339_now_ms();
// One record as its line would be written (no newline): for tests and for callers that
// write elsewhere.
std::string format_log_line(LogFormat f, std::string_view ts, LogLevel l, std::string_view msg,
                            const std::vector<LogField>& fields);

}  // namespace ts

#define TS_LOG_DEBUG(...) ::ts::log_printf(::ts::LogLevel::kDebug, __VA_ARGS__)
#define TS_LOG_INFO(...) ::ts::log_printf(::ts::LogLevel::kInfo, __VA_ARGS__)
#define TS_LOG_WARN(...) ::ts::log_printf(::ts::LogLevel::kWarn, __VA_ARGS__)
#define TS_LOG_ERROR(...) ::ts::log_printf(::ts::LogLevel::kError, __VA_ARGS__)
