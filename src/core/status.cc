#include "core/status.h"

#include "core/check.h"

namespace ts {

const char* status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kDataLoss: return "DataLoss";
    case StatusCode::kUnimplemented: return "Unimplemented";
    case StatusCode::kOutOfRange: return "OutOfRange";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kIo: return "IoError";
    case StatusCode::kUnavailable: return "Unavailable";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + msg_;
}

namespace detail {
void check_failed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "tierserve: CHECK failed at %s:%d: %s %s\n", file, line, cond, msg);
  std::fflush(stderr);
  std::abort();
}
}  // namespace detail

}  // namespace ts
