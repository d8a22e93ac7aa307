#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

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

std::atomic<LogFormat>& format_ref() {
  static std::atomic<LogFormat> f{LogFormat::kText};
  return f;
}

const char* level_name(LogLevel l) {
  static const char* kNames[] = {"debug", "info", "warn", "error"};
  return kNames[int(l)];
}

// JSON string escaping (also used for quoted text values): quotes, backslashes and control
// characters; other bytes as they are (log text is UTF-8 or whatever the caller passed).
void escape_into(std::string& out, std::string_view s) {
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
}

bool needs_quotes(std::string_view v) {
  if (v.empty()) return true;
  for (unsigned char c : v)
    if (c <= ' ' || c == '"' || c == '=' || c == 0x7f) return true;
  return false;
}

}  // namespace

LogField::LogField(std::string k, double v) : key(std::move(k)), number(true) {
  char b[32];
  if (std::isfinite(v)) std::snprintf(b, sizeof b, "%.3f", v);
  else std::snprintf(b, sizeof b, "null");  // JSON has no NaN
  value = b;
}

LogLevel log_level() { return level_ref().load(); }
void set_log_level(LogLevel l) { level_ref().store(l); }
LogFormat log_format() { return format_ref().load(); }
void set_log_format(LogFormat f) { format_ref().store(f); }

std::string rfc3339_now_ms() {
  const auto now = std::chrono::system_clock::now();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const std::time_t secs = std::time_t(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char b[40];
  std::snprintf(b, sizeof b, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms % 1000));
  return b;
}

std::string format_log_line(LogFormat f, std::string_view ts, LogLevel l, std::string_view msg,
                            const std::vector<LogField>& fields) {
  std::string out;
  if (f == LogFormat::kJson) {
    out = "{\"ts\":\"";
    escape_into(out, ts);
    out += "\",\"level\":\"";
    out += level_name(l);
    out += "\",\"msg\":\"";
    escape_into(out, msg);
    out += '"';
    for (const LogField& x : fields) {
      out += ",\"";
      escape_into(out, x.key);
      out += "\":";
      if (x.number) {
        out += x.value;
      } else {
        out += '"';
        escape_into(out, x.value);
        out += '"';
      }
    }
    out += '}';
    return out;
  }
  out.append(ts);
  out += ' ';
  out += level_name(l);
  out += ' ';
  // The message as it is, but never across lines.
  for (char c : msg) out += c == '\n' || c == '\r' ? ' ' : c;
  for (const LogField& x : fields) {
    out += ' ';
    out += x.key;
    out += '=';
    if (!x.number && needs_quotes(x.value)) {
      out += '"';
      escape_into(out, x.value);
      out += '"';
    } else {
      out += x.value;
    }
  }
  return out;
}

void log_record(LogLevel l, std::string_view msg, const std::vector<LogField>& fields) {
  if (l < log_level()) return;
  std::string line = format_log_line(log_format(), rfc3339_now_ms(), l, msg, fields);
  line += '\n';
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void log_printf(LogLevel l, const char* fmt, ...) {
  if (l < log_level()) return;
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  log_record(l, buf);
}

}  // namespace ts
