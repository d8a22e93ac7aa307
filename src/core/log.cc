#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ts {
namespace {

LogLevel level_from_env() {
  const char* e = std::getenv("TIERSERVE_LOG");
  if (!e) return LogLevel::kInfo;
  if (!std::strcmp(e, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(e, "warn")) return LogLevel::kWarn;
  if (!std::strcmp(e, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> l{level_from_env()};
  return l;
}

}  // namespace

LogLevel log_level() { return level_ref().load(); }
void set_log_level(LogLevel l) { level_ref().store(l); }

void log_printf(LogLevel l, const char* fmt, ...) {
  if (l < log_level()) return;
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "[tierserve %s] %s\n", kNames[int(l)], buf);
}

}  // namespace ts
