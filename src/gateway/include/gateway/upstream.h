// The gateway's HTTP/1.1 client to its workers: keep-alive connections per worker, the
// response handed over as it arrives (status and headers, then every body read), so that
// streams pass through unbuffered. One io_context, run by the caller's threads; every call
// runs on a strand of its own, and its callbacks come from there, in order: on_head at most
// once, on_data zero or more times, then on_end exactly once.
//
// Timeouts: connecting (connect_timeout_ms), until the status line (head_timeout_ms: a
// non-streamed completion answers only when it is done), and between two reads of the body
// (idle_timeout_ms). cancel() ends a call with kCancelled (the connection is closed, which a
// tierserve worker reads as the client going away: it cancels the generation).
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "gateway/config.h"
#include "server/http_types.h"

namespace ts::gateway {

enum class UpstreamError : uint8_t {
  kNone,
  kConnect,    // refused, unreachable, or the connect timed out
  kTimeout,    // no status line, or no body byte, within its timeout
  kClosed,     // the connection ended before the response did (a worker that died)
  kProtocol,   // not HTTP/1.1 the parser accepts
  kCancelled,  // cancel()
};
std::string_view upstream_error_name(UpstreamError e);

struct UpstreamRequest {
  std::string method = "POST";
  std::string path;            // "/v1/chat/completions"
  std::string body;
  std::string content_type = "application/json";
  server::Headers headers;     // extra (x-request-id, traceparent, authorization)
  int64_t head_timeout_ms = 0; // 0: the pool's
};

struct UpstreamHandlers {
  std::function<void(int status, const server::Headers& headers)> on_head;  // names lowercased
  std::function<void(std::string_view bytes)> on_data;
  std::function<void(UpstreamError e, const std::string& detail)> on_end;
};

class UpstreamCall {
 public:
  virtual ~UpstreamCall() = default;
  virtual void cancel() = 0;  // thread-safe; no effect after on_end
};

class UpstreamPool {
 public:
  // kInvalidArgument when the host does not resolve.
  static Result<std::shared_ptr<UpstreamPool>> create(boost::asio::io_context& io, const HostPort& target,
                                                      const UpstreamConfig& timeouts);
  virtual ~UpstreamPool() = default;
  virtual std::shared_ptr<UpstreamCall> send(UpstreamRequest req, UpstreamHandlers h) = 0;
  // Closes the idle connections (after the worker restarted at another address, say).
  virtual void close_idle() = 0;
};

}  // namespace ts::gateway
