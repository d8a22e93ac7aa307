// HTTP/1.1 request framing, apart from sockets: bytes in, complete requests or one framing
// error out. Every rule about where a request ends lives here (RFC 9112 §6), checked when
// a request's head is complete and before a byte of its body is read or a handler runs:
//
// - Transfer-Encoding must be exactly `chunked` (one coding, any case). A list whose last
//   coding is not chunked cannot be framed: 400 `bad_transfer_encoding` (the smuggling
//   case: its body would otherwise be read as the next request). Other codings before
//   chunked (gzip, deflate, ...) are not implemented: 501 `unsupported_transfer_encoding`.
//   Transfer-Encoding in an HTTP/1.0 request: 400.
// - Transfer-Encoding together with Content-Length: 400 `conflicting_framing`.
// - Content-Length: one header, decimal digits only (a list of equal values is refused
//   too): else 400 `bad_content_length`.
// - HTTP/1.1 requests carry exactly one Host header (RFC 9112 §3.2): else 400 `bad_host`.
// - A well-formed version other than 1.0 and 1.1: 505 `http_version_not_supported`.
// - The target is origin-form ("/path?query"), absolute-form ("http://host/path", reduced
//   to its path) or "*" for OPTIONS: else 400 `bad_target`.
// - Head over `max_header_bytes`: 431 `header_too_large`; body over `max_body_bytes`
//   (declared or received): 413 `body_too_large`; any other syntax error (request line,
//   header field, chunk framing): 400 `bad_request`.
//
// A framing error is terminal: the connection answers it and closes, since the position of
// the next request in the stream is unknown. The HTTP server (http_server.cc) feeds the
// bytes it reads; the connection-level fuzzer (fuzz/http_fuzz.cc) feeds arbitrary streams.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/http_types.h"

namespace ts::server {

struct FramingLimits {
  int64_t max_header_bytes = 16 * 1024;
  int64_t max_body_bytes = 4 * 1024 * 1024;
};

struct FramingError {
  int status = 400;
  std::string code;     // machine-readable, as the error body's "code"
  std::string message;  // for the error body's "message"
};

// One connection's request stream. Not thread-safe (a connection's strand owns it).
class RequestFramer {
 public:
  enum class Next {
    kNeedMore,  // no complete request in the bytes so far
    kRequest,   // *req holds the next request (call next() again for a pipelined one)
    kError,     // *err holds the framing error; the stream is unusable from here on
  };

  explicit RequestFramer(const FramingLimits& limits);
  ~RequestFramer();
  RequestFramer(const RequestFramer&) = delete;
  RequestFramer& operator=(const RequestFramer&) = delete;

  // Appends bytes read from the connection.
  void feed(std::string_view bytes);
  // Parses what the buffered bytes allow.
  Next next(HttpRequest* req, FramingError* err);

  // Bytes of a request that is not complete yet are buffered (a timeout now is a 408).
  bool in_request() const;
  // The current request's head is complete, asked for "100-continue" and its body has not
  // begun: the server answers "100 Continue" once (clear_continue()).
  bool wants_continue() const;
  void clear_continue();
  // Bytes fed but not yet consumed by a returned request.
  size_t buffered() const;

  // Facts of the request most recently returned by next().
  bool keep_alive() const { return keep_alive_; }
  bool http10() const { return http10_; }

 private:
  struct Parser;
  void reset_parser();
  bool check_head(FramingError* err);

  FramingLimits limits_;
  std::string buf_;
  size_t pos_ = 0;        // consumed prefix of buf_
  size_t head_scan_ = 0;  // where the search for the current head's end goes on
  std::unique_ptr<Parser> parser_;
  bool head_checked_ = false;
  bool continue_pending_ = false;
  bool failed_ = false;
  FramingError error_;
  bool keep_alive_ = true;
  bool http10_ = false;
};

}  // namespace ts::server
