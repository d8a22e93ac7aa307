// HTTP/1.1 plumbing on Boost.Asio: listeners, connections, limits and timeouts. Bytes read
// from a connection go to its RequestFramer (server/http_framing.h), which alone decides
// where requests begin and end; complete requests go to a dispatch function with a
// Responder, and whatever the Responder is told is written, in order, from the
// connection's strand.
//
// One io_context, a few threads (HttpConfig::threads); each connection is a strand, so a
// connection's handlers never run concurrently. A framing error (400/413/431/501/505) and
// a request not complete within the read timeout (408) are answered by the connection
// itself, then it closes. Timeouts: the idle timeout between keep-alive requests (a quiet
// close), the read timeout from a request's first byte to its last (not re-armed per
// byte), a write timeout per write (a stalled reader is dropped). A connection reads at
// all times, so while a response is pending pipelined bytes are kept and a client that
// closes its socket is noticed at once: the Responder's disconnect hook runs (which cancels
// the generation). After its last response a connection half-closes and drains until the
// client's EOF (bounded), so that the answer is not destroyed by a reset.
//
// Connections: at most HttpServerOptions::max_connections are open at once on the
// listeners that enforce it (listen(..., limit_connections = true), the default). One more
// is answered "503 Service Unavailable" at once, with Retry-After and an OpenAI error body
// (code "overloaded"), and closed the same careful way; the open ones are not disturbed.
// While 64 refusals are in progress and no slot is free, the listener stops accepting and
// the kernel's backlog holds newcomers: no connection is dropped unanswered. A
// connection's slot is freed when its socket closes.
//
// Responses are serialized here (status line, headers, Content-Length or chunked
// Transfer-Encoding for streams).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "server/http_types.h"

namespace ts::server {

struct HttpServerOptions {
  int64_t max_header_bytes = 16 * 1024;
  int64_t max_body_bytes = 4 * 1024 * 1024;
  int64_t idle_timeout_ms = 60000;
  int64_t read_timeout_ms = 30000;
  int64_t write_timeout_ms = 60000;
  int64_t max_connections = 1024;  // open at once on the limited listeners; 0: unlimited
};

using Dispatch = std::function<void(const HttpRequest&, std::shared_ptr<Responder>)>;

class HttpServer {
 public:
  explicit HttpServer(const HttpServerOptions& opts);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0: any) and accepts once start() runs. Returns the bound port.
  // kIo when the address cannot be bound, kInvalidArgument when host is not an address.
  // limit_connections false: the listener's connections are neither limited nor counted
  // (an admin listener stays reachable while the main one is full).
  Result<int> listen(const std::string& host, int port, Dispatch dispatch, bool limit_connections = true);
  // Runs the io_context on n threads (returns at once).
  void start(int n_threads);
  // Closes the listeners; open connections finish their current response, and every
  // response from now on says "Connection: close". Thread-safe.
  void stop_accepting();
  // Requests dispatched whose response has not been completely written (or abandoned).
  int64_t in_flight() const;
  // Open connections on the limited listeners, the limit, and how many were turned away.
  ConnectionStats connection_stats() const;
  // Stops the io_context and joins its threads. Idempotent.
  void stop();

  struct Impl;  // opaque; public only so the connection code in the .cc can name it

 private:
  std::unique_ptr<Impl> impl_;
};

// "HTTP/1.1 200 OK\r\n..." for a complete response (exposed for tests).
std::string serialize_response(const HttpResponse& r, bool keep_alive, bool head_only);

}  // namespace ts::server
