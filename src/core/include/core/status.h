// Status and Result<T>: errors as values, no exceptions (LevelDB/Envoy style).
//
// Untrusted input (files, network, user flags) yields a Status with a code and a message
// that names what was wrong and where; "cannot happen" conditions use TS_CHECK instead.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ts {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,   // bad flag or request parameter
  kNotFound,          // missing file, unknown key
  kDataLoss,          // malformed or truncated file
  kUnimplemented,     // unsupported architecture, tensor type, feature
  kOutOfRange,        // prompt longer than the context, index past the end
  kResourceExhausted, // no room (KV blocks, queue)
  kFailedPrecondition,
  kInternal,
  kIo,                // OS call failed
  kUnavailable,       // not serving now (draining, shutting down); retry elsewhere/later
};

const char* status_code_name(StatusCode c);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }
  // "DataLoss: tensor 'x' offset 123 ..." for printing.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string msg_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIo, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                 // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).is_ok()); }  // NOLINT

  bool is_ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ts

#define TS_CONCAT_INNER_(a, b) a##b
#define TS_CONCAT_(a, b) TS_CONCAT_INNER_(a, b)

// Return the Status from the enclosing function if `expr` is not OK.
#define TS_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::ts::Status ts_status_ = (expr);             \
    if (!ts_status_.is_ok()) return ts_status_;   \
  } while (0)

// `TS_ASSIGN_OR_RETURN(auto x, f());` unwraps a Result or returns its Status.
#define TS_ASSIGN_OR_RETURN(lhs, expr) TS_ASSIGN_OR_RETURN_IMPL_(TS_CONCAT_(ts_r_, __LINE__), lhs, expr)
#define TS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.is_ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
