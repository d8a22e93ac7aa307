// The async HTTP/1.1 client: one io_context, a keep-alive connection pool per target,
// streamed bodies read incrementally so every SSE chunk is timed when it arrives.
// Private to the bench layer (it exposes Asio types).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/record.h"
#include "core/clock.h"
#include "core/status.h"

namespace ts::bench {

struct Target {
  std::string host, port, base_path;  // base_path without a trailing '/'
  std::string label;
  std::string model_version;  // sent as x-tierserve-model-version: one version through a gateway
};
// "http://host:port[/prefix]" -> Target. https is not supported (say so).
Result<Target> parse_url(const std::string& url);

struct WireRequest {
  std::string path;     // "/v1/chat/completions"
  std::string body;     // JSON
  std::string api_key;  // "" = no Authorization header
};

class HttpClient {
 public:
  using Done = std::function<void(RequestRecord&&)>;
  // Resolves the host once (blocking); errors are configuration errors.
  static Result<std::unique_ptr<HttpClient>> create(boost::asio::io_context& io, Target t,
                                                    const Clock& clock, double timeout_s);
  ~HttpClient();

  // Sends now; stamps rec.sent_ns; `done` runs on the io thread once the response ended
  // or failed (rec.error set). A request that fails on a reused idle connection before
  // any response byte is retried once on a fresh one (the server may have closed it).
  void send(WireRequest req, RequestRecord rec, Done done);

  const Target& target() const { return target_; }
  size_t connections_opened() const { return n_opened_; }

 private:
  struct Conn;
  struct Op;
  HttpClient(boost::asio::io_context& io, Target t, const Clock& clock, double timeout_s);
  std::shared_ptr<Conn> take_conn(bool* reused);
  void give_back(std::shared_ptr<Conn> c);
  void start(std::shared_ptr<Op> op);
  void fail(std::shared_ptr<Op> op, const char* type, const std::string& detail, bool before_response);
  void read_body(std::shared_ptr<Op> op);

  boost::asio::io_context& io_;
  Target target_;
  const Clock& clock_;
  double timeout_s_;
  boost::asio::ip::tcp::resolver::results_type endpoints_;
  std::vector<std::shared_ptr<Conn>> idle_;
  size_t n_opened_ = 0;
};

}  // namespace ts::bench
