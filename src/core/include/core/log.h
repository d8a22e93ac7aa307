// Minimal leveled logging to stderr. TIERSERVE_LOG=debug|info|warn|error sets the level.
#pragma once

namespace ts {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

LogLevel log_level();
void set_log_level(LogLevel l);
void log_printf(LogLevel l, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ts

#define TS_LOG_DEBUG(...) ::ts::log_printf(::ts::LogLevel::kDebug, __VA_ARGS__)
#define TS_LOG_INFO(...) ::ts::log_printf(::ts::LogLevel::kInfo, __VA_ARGS__)
#define TS_LOG_WARN(...) ::ts::log_printf(::ts::LogLevel::kWarn, __VA_ARGS__)
#define TS_LOG_ERROR(...) ::ts::log_printf(::ts::LogLevel::kError, __VA_ARGS__)
