// Request and response as handlers see them, apart from the socket code (seastar's split):
// the HTTP plumbing (server/http_server.h) turns bytes into an HttpRequest and a Responder
// into bytes; routes and handlers are tested with a recording Responder and no sockets.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ts::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string path;     // target without the query
  std::string query;    // after '?', undecoded
  Headers headers;      // names lowercased
  std::string body;
  std::string peer;     // "ip:port", for logs

  // The first header of that (lowercase) name, or "".
  std::string_view header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers)
      if (k == lower_name) return v;
    return {};
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  Headers headers;      // extra headers, names as written
  std::string body;     // ignored by Responder::start_stream
};

// How a handler answers one request: respond() once, or start_stream(), send()* and
// end(). Thread-safe and non-blocking: the serving layer's callbacks call it from the
// engine-loop thread, and the implementation posts the work to the connection.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void respond(HttpResponse r) = 0;
  // Status and headers of an event stream (text/event-stream, chunked); body ignored.
  virtual void start_stream(HttpResponse head) = 0;
  virtual void send(std::string data) = 0;
  virtual void end() = 0;
  // `fn` runs once, on some thread, if the client goes away before the response ended
  // (at once if it already has). It must not block.
  virtual void on_disconnect(std::function<void()> fn) = 0;
  // The access-log record of this exchange (server/access_log.h), for a handler to add
  // what it knows before it ends the response; null when the exchange is not logged.
  virtual struct AccessRecord* access_record() { return nullptr; }
};

using Handler = std::function<void(const HttpRequest&, std::shared_ptr<Responder>)>;

// The HTTP layer's connection accounting, for /admin/stats (HttpServer::connection_stats).
struct ConnectionStats {
  int64_t open = 0;       // connections open on the listeners that enforce the limit
  int64_t max = 0;        // that limit (HttpServerOptions::max_connections); 0: none
  uint64_t rejected = 0;  // connections turned away with 503 since the start
};

// "Retry-After" wants whole seconds; round up so a client never retries too early.
inline std::string retry_after_seconds(int64_t ms) { return std::to_string(ms <= 0 ? 1 : (ms + 999) / 1000); }

}  // namespace ts::server
