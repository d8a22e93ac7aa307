#include "server/http_server.h"

#include "server/api_error.h"
#include "server/router.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <cctype>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace ts::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

const char* reason_phrase(int status) {
  const auto s = http::obsolete_reason(static_cast<http::status>(status));
  return s.empty() ? "Unknown" : s.data();
}

std::string head_lines(int status, const std::string& content_type, const Headers& headers) {
  std::string s = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  s += "Server: tierserve\r\n";
  if (!content_type.empty()) s += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : headers) {
    // Header values come from our own code, but a quoted client string must never split a
    // header: drop CR and LF.
    std::string clean;
    for (char c : v)
      if (c != '\r' && c != '\n') clean.push_back(c);
    s += k + ": " + clean + "\r\n";
  }
  return s;
}

}  // namespace

std::string serialize_response(const HttpResponse& r, bool keep_alive, bool head_only) {
  std::string s = head_lines(r.status, r.content_type, r.headers);
  s += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  s += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!head_only) s += r.body;
  return s;
}

struct HttpServer::Impl {
  HttpServerOptions opts;
  // Connection accounting. Declared before ioc: connections still queued in the
  // io_context when it is destroyed give their slot back in their destructor.
  std::atomic<int64_t> open_connections{0};      // on the limited listeners
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<int64_t> rejecting{0};             // 503s being written right now
  net::io_context ioc;
  std::vector<std::shared_ptr<tcp::acceptor>> acceptors;
  std::vector<std::thread> threads;
  std::atomic<int64_t> in_flight{0};
  std::atomic<bool> closing{false};
  std::once_flag stopped;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  explicit Impl(const HttpServerOptions& o) : opts(o) {}

  // Takes a connection slot when one is free (always, without a limit).
  bool take_slot() {
    const int64_t max = opts.max_connections;
    if (max <= 0) {
      open_connections.fetch_add(1);
      return true;
    }
    int64_t cur = open_connections.load();
    while (cur < max)
      if (open_connections.compare_exchange_weak(cur, cur + 1)) return true;
    return false;
  }
};

namespace {

class Connection;

// The handler's side of one request on one connection: every call is posted to the
// connection's strand and tagged with the request's sequence number, so a late call for
// a finished request is ignored.
class ConnResponder final : public Responder {
 public:
  ConnResponder(std::shared_ptr<Connection> c, uint64_t seq) : conn_(std::move(c)), seq_(seq) {}
  void respond(HttpResponse r) override;
  void start_stream(HttpResponse head) override;
  void send(std::string data) override;
  void end() override;
  void on_disconnect(std::function<void()> fn) override;

 private:
  std::shared_ptr<Connection> conn_;
  uint64_t seq_;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // holds_slot: the connection took one of the server's connection slots (take_slot),
  // given back when its socket closes.
  Connection(tcp::socket&& s, HttpServer::Impl& srv, Dispatch d, bool holds_slot)
      : stream_(std::move(s)), srv_(srv), dispatch_(d), holds_slot_(holds_slot) {
    beast::error_code ec;
    const auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~Connection() { release_slot(); }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
  }

  // --- called on the strand by ConnResponder ---
  void do_respond(uint64_t seq, HttpResponse r) {
    if (!current(seq) || started_) return;
    started_ = true;
    queue(serialize_response(r, keep_alive_ && !srv_.closing.load(), head_only_));
    if (srv_.closing.load()) keep_alive_ = false;
    done_ = true;
    flush();
  }
  void do_start_stream(uint64_t seq, HttpResponse h) {
    if (!current(seq) || started_) return;
    started_ = true;
    streaming_ = true;
    if (srv_.closing.load() || http10_) keep_alive_ = false;
    std::string s = head_lines(h.status, h.content_type, h.headers);
    if (http10_) {
      s += "Connection: close\r\n\r\n";  // HTTP/1.0: no chunking; the end is the close
    } else {
      s += "Transfer-Encoding: chunked\r\n";
      s += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    }
    queue(std::move(s));
    flush();
  }
  void do_send(uint64_t seq, std::string data) {
    if (!current(seq) || !streaming_ || done_ || data.empty()) return;
    if (http10_) {
      queue(std::move(data));
    } else {
      char hex[32];
      std::snprintf(hex, sizeof hex, "%zx\r\n", data.size());
      std::string c = hex;
      c += data;
      c += "\r\n";
      queue(std::move(c));
    }
    flush();
  }
  void do_end(uint64_t seq) {
    if (!current(seq) || !streaming_ || done_) return;
    if (!http10_) queue("0\r\n\r\n");
    done_ = true;
    flush();
  }
  void do_on_disconnect(uint64_t seq, std::function<void()> fn) {
    if (seq != seq_) return;  // that response finished; another request runs now
    if (closed_) {
      fn();  // the client is already gone: cancel now
      return;
    }
    if (!active_) return;  // the response already completed
    on_disconnect_ = std::move(fn);
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

 private:
  bool current(uint64_t seq) const { return seq == seq_ && active_ && !closed_; }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(uint32_t(std::min<int64_t>(srv_.opts.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(uint64_t(srv_.opts.max_body_bytes));
    stream_.expires_after(std::chrono::milliseconds(srv_.opts.idle_timeout_ms));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    // curl and others wait for "100 Continue" before sending a large body.
    const auto& h = parser_->get();
    if (auto it = h.find(http::field::expect); it != h.end() && beast::iequals(it->value(), "100-continue")) {
      continue_sent_ = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      stream_.expires_after(std::chrono::milliseconds(srv_.opts.write_timeout_ms));
      net::async_write(stream_, net::buffer(*continue_sent_),
                       [self = shared_from_this()](beast::error_code ec2, size_t) {
                         if (ec2) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(std::chrono::milliseconds(srv_.opts.read_timeout_ms));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_request(ec); });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      return close();
    }
    // A malformed or oversized request: answer once, then close (the stream position is lost).
    int status = 400;
    std::string code = "bad_request", msg = "malformed HTTP request: " + ec.message();
    if (ec == http::error::header_limit) {
      status = 431, code = "header_too_large";
      msg = "request headers exceed " + std::to_string(srv_.opts.max_header_bytes) + " bytes";
    } else if (ec == http::error::body_limit) {
      status = 413, code = "body_too_large";
      msg = "request body exceeds " + std::to_string(srv_.opts.max_body_bytes) + " bytes";
    }
    ApiError e = bad_request(msg, "", code);
    e.status = status;
    HttpResponse r = error_response(e);
    active_ = true;
    ++seq_;
    keep_alive_ = false;
    srv_.in_flight.fetch_add(1);
    do_respond(seq_, std::move(r));
  }

  void on_request(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    http::request<http::string_body> msg = parser_->release();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    const std::string target(msg.target());
    const size_t q = target.find('?');
    req.path = target.substr(0, q);
    if (q != std::string::npos) req.query = target.substr(q + 1);
    for (const auto& f : msg) {
      std::string name(f.name_string());
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      req.headers.emplace_back(std::move(name), std::string(f.value()));
    }
    req.body = std::move(msg.body());
    req.peer = peer_;
    keep_alive_ = msg.keep_alive() && !srv_.closing.load();
    http10_ = msg.version() < 11;
    head_only_ = msg.method() == http::verb::head;
    ++seq_;
    active_ = true;
    started_ = streaming_ = done_ = false;
    srv_.in_flight.fetch_add(1);
    stream_.expires_never();
    auto responder = std::make_shared<ConnResponder>(shared_from_this(), seq_);
    dispatch_(req, std::move(responder));
    watch();
  }

  // While a response is pending, keep reading: bytes are kept for the next request
  // (pipelining), and EOF or an error means the client went away.
  void watch() {
    if (watching_ || closed_ || !active_) return;
    if (buffer_.size() >= size_t(srv_.opts.max_header_bytes + srv_.opts.max_body_bytes)) return;
    watching_ = true;
    stream_.socket().async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->on_watch(ec, n);
    });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (!ec) {
      buffer_.commit(n);
      if (active_) watch();
      else if (!closed_) read_header();
      return;
    }
    if (ec == net::error::operation_aborted && !closed_) {
      if (!active_) read_header();  // cancelled to start the next request
      return;
    }
    disconnected();
  }

  void queue(std::string s) { outq_.push_back(std::move(s)); }

  void flush() {
    if (writing_ || closed_) return;
    if (outq_.empty()) {
      if (done_) finish();
      return;
    }
    wbuf_.clear();
    for (auto& s : outq_) wbuf_ += s;
    outq_.clear();
    writing_ = true;
    stream_.expires_after(std::chrono::milliseconds(srv_.opts.write_timeout_ms));
    net::async_write(stream_, net::buffer(wbuf_), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->disconnected();
      self->flush();
    });
  }

  // The response is completely written.
  void finish() {
    if (!active_) return;
    active_ = false;
    on_disconnect_ = nullptr;
    srv_.in_flight.fetch_sub(1);
    if (!keep_alive_) {
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      return close();
    }
    if (watching_) {
      beast::error_code ec;
      stream_.socket().cancel(ec);  // on_watch(operation_aborted) starts the next read
    } else {
      read_header();
    }
  }

  void disconnected() {
    if (closed_) return;
    if (auto fn = std::move(on_disconnect_)) {
      on_disconnect_ = nullptr;
      if (active_) fn();
    }
    close();
  }

  void release_slot() {
    if (!holds_slot_) return;
    holds_slot_ = false;
    srv_.open_connections.fetch_sub(1);
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    release_slot();
    if (active_) {
      active_ = false;
      srv_.in_flight.fetch_sub(1);
    }
    if (auto fn = std::move(on_disconnect_)) {
      on_disconnect_ = nullptr;
      fn();
    }
    beast::error_code ec;
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& srv_;
  Dispatch dispatch_;  // a copy: the listener may go before its connections
  std::string peer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<std::string> continue_sent_;

  uint64_t seq_ = 0;
  bool active_ = false;     // a request is dispatched and its response not finished
  bool started_ = false;    // respond() or start_stream() happened
  bool streaming_ = false;
  bool done_ = false;       // the response's last bytes are queued
  bool keep_alive_ = true;
  bool http10_ = false;
  bool head_only_ = false;
  bool watching_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool holds_slot_ = false;
  std::deque<std::string> outq_;
  std::string wbuf_;
  std::function<void()> on_disconnect_;
};

void ConnResponder::respond(HttpResponse r) {
  net::post(conn_->executor(), [c = conn_, s = seq_, r = std::move(r)]() mutable { c->do_respond(s, std::move(r)); });
}
void ConnResponder::start_stream(HttpResponse h) {
  net::post(conn_->executor(), [c = conn_, s = seq_, h = std::move(h)]() mutable { c->do_start_stream(s, std::move(h)); });
}
void ConnResponder::send(std::string data) {
  net::post(conn_->executor(), [c = conn_, s = seq_, d = std::move(data)]() mutable { c->do_send(s, std::move(d)); });
}
void ConnResponder::end() {
  net::post(conn_->executor(), [c = conn_, s = seq_] { c->do_end(s); });
}
void ConnResponder::on_disconnect(std::function<void()> fn) {
  net::post(conn_->executor(), [c = conn_, s = seq_, f = std::move(fn)]() mutable { c->do_on_disconnect(s, std::move(f)); });
}

// A connection beyond max_connections: reads the request head (briefly, bounded), answers
// 503 with Retry-After and closes. The close waits for the client's EOF (or a short
// timeout) after the answer, so unread request bytes do not turn the close into a reset
// that would destroy the answer before the client reads it.
class Rejection : public std::enable_shared_from_this<Rejection> {
 public:
  static constexpr auto kWait = std::chrono::milliseconds(2000);  // for the head, then for EOF
  static constexpr size_t kMaxDrain = 1 << 20;

  Rejection(tcp::socket&& s, HttpServer::Impl& srv) : stream_(std::move(s)), srv_(srv) { srv_.rejecting.fetch_add(1); }
  ~Rejection() { srv_.rejecting.fetch_sub(1); }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->stream_.expires_after(kWait);
      self->read_head();
    });
  }

 private:
  void read_head() {
    stream_.async_read_some(net::buffer(buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->close();  // gone, or silent until the timeout (which closed the socket)
      self->head_.append(self->buf_.data(), n);
      if (self->head_.find("\r\n\r\n") == std::string::npos &&
          self->head_.size() < size_t(std::max<int64_t>(self->srv_.opts.max_header_bytes, 512)))
        return self->read_head();
      self->respond();
    });
  }

  void respond() {
    ApiError e = server_error(503,
                              "the server has reached its limit of " + std::to_string(srv_.opts.max_connections) +
                                  " open connections; retry later",
                              "overloaded");
    e.retry_after_ms = 1000;
    out_ = serialize_response(error_response(e), false, false);
    stream_.expires_after(kWait);
    net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      beast::error_code ignore;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignore);
      self->stream_.expires_after(kWait);
      self->drain();
    });
  }

  void drain() {
    stream_.async_read_some(net::buffer(buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > kMaxDrain) return self->close();
      self->drain();
    });
  }

  void close() {
    beast::error_code ignore;
    stream_.socket().close(ignore);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& srv_;
  std::array<char, 4096> buf_{};
  std::string head_, out_;
  size_t drained_ = 0;
};

// Accepts connections on one address until closed.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // Rejections being written at once beyond this are dropped without an answer (a flood
  // must not cost more than a bounded amount of work and sockets).
  static constexpr int64_t kMaxRejecting = 64;

  Listener(HttpServer::Impl& srv, std::shared_ptr<tcp::acceptor> acc, Dispatch d, bool limited)
      : srv_(srv), acc_(std::move(acc)), dispatch_(std::move(d)), limited_(limited), retry_(acc_->get_executor()) {}
  void accept() {
    acc_->async_accept(net::make_strand(srv_.ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == net::error::operation_aborted || !self->acc_->is_open()) return;
        // EMFILE and friends: the failed connection is lost, not the server. Accept again
        // after a pause, so a lasting error (out of file descriptors) does not spin.
        self->retry_.expires_after(std::chrono::milliseconds(50));
        self->retry_.async_wait([self](beast::error_code) { self->accept(); });
        return;
      }
      beast::error_code ignore;
      s.set_option(tcp::no_delay(true), ignore);
      if (!self->limited_) {
        std::make_shared<Connection>(std::move(s), self->srv_, self->dispatch_, false)->start();
      } else if (self->srv_.take_slot()) {
        std::make_shared<Connection>(std::move(s), self->srv_, self->dispatch_, true)->start();
      } else {
        self->srv_.rejected_connections.fetch_add(1);
        if (self->srv_.rejecting.load() < kMaxRejecting) std::make_shared<Rejection>(std::move(s), self->srv_)->start();
        // else the socket closes here, unanswered
      }
      self->accept();
    });
  }

 private:
  HttpServer::Impl& srv_;
  std::shared_ptr<tcp::acceptor> acc_;
  Dispatch dispatch_;
  bool limited_;
  net::steady_timer retry_;
};

}  // namespace

HttpServer::HttpServer(const HttpServerOptions& opts) : impl_(std::make_unique<Impl>(opts)) {
  impl_->work.emplace(net::make_work_guard(impl_->ioc));
}

HttpServer::~HttpServer() { stop(); }

Result<int> HttpServer::listen(const std::string& host, int port, Dispatch dispatch, bool limit_connections) {
  beast::error_code ec;
  net::ip::address addr = net::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return invalid_argument("listen address '" + host + "' is not an IP address");
  if (port < 0 || port > 65535) return invalid_argument("port " + std::to_string(port) + " out of range");
  auto acc = std::make_shared<tcp::acceptor>(net::make_strand(impl_->ioc));
  const tcp::endpoint ep(addr, uint16_t(port));
  acc->open(ep.protocol(), ec);
  if (!ec) acc->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc->bind(ep, ec);
  if (!ec) acc->listen(net::socket_base::max_listen_connections, ec);
  if (ec) return io_error("cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  const int bound = acc->local_endpoint(ec).port();
  impl_->acceptors.push_back(acc);
  // The Listener holds a copy of the dispatch function that connections reference.
  auto l = std::make_shared<Listener>(*impl_, acc, std::move(dispatch), limit_connections);
  net::post(acc->get_executor(), [l] { l->accept(); });
  return bound;
}

void HttpServer::start(int n_threads) {
  for (int i = 0; i < std::max(1, n_threads); ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

void HttpServer::stop_accepting() {
  impl_->closing.store(true);
  for (auto& a : impl_->acceptors)
    net::post(a->get_executor(), [a] {
      beast::error_code ec;
      a->close(ec);
    });
}

int64_t HttpServer::in_flight() const { return impl_->in_flight.load(); }

ConnectionStats HttpServer::connection_stats() const {
  ConnectionStats s;
  s.open = impl_->open_connections.load();
  s.max = impl_->opts.max_connections;
  s.rejected = impl_->rejected_connections.load();
  return s;
}

void HttpServer::stop() {
  std::call_once(impl_->stopped, [this] {
    impl_->work.reset();
    impl_->ioc.stop();
    for (auto& t : impl_->threads)
      if (t.joinable()) t.join();
  });
}

}  // namespace ts::server
