#include "server/http_server.h"

#include "server/api_error.h"
#include "server/http_framing.h"
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
  std::atomic<int64_t> rejecting{0};             // refused connections not yet closed
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
  bool slot_free() const { return opts.max_connections <= 0 || open_connections.load() < opts.max_connections; }
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
  // How long a closing connection keeps reading (and discarding) after its last response,
  // so that request bytes still in flight do not turn the close into a reset that would
  // destroy the response before the client reads it (a "lingering close").
  static constexpr auto kLinger = std::chrono::milliseconds(2000);
  static constexpr size_t kMaxLingerBytes = 1 << 20;

  // holds_slot: the connection took one of the server's connection slots (take_slot),
  // given back when its socket closes. reject: over the connection limit; it is answered
  // 503 at once and closed.
  Connection(tcp::socket&& s, HttpServer::Impl& srv, Dispatch d, bool holds_slot, bool reject)
      : socket_(std::move(s)),
        srv_(srv),
        dispatch_(std::move(d)),
        framer_(FramingLimits{srv.opts.max_header_bytes, srv.opts.max_body_bytes}),
        read_timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        holds_slot_(holds_slot),
        reject_(reject) {
    beast::error_code ec;
    const auto ep = socket_.remote_endpoint(ec);
    if (!ec) peer_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    if (reject_) srv_.rejecting.fetch_add(1);
  }
  ~Connection() {
    release_slot();
    if (active_) srv_.in_flight.fetch_sub(1);  // never left counted (drain waits on it)
    if (reject_) srv_.rejecting.fetch_sub(1);
  }

  void start() {
    net::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      if (self->reject_) {
        self->refuse();
      } else {
        self->arm_read_timer(self->srv_.opts.idle_timeout_ms);
      }
      self->read();
    });
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

  net::any_io_executor executor() { return socket_.get_executor(); }

 private:
  bool current(uint64_t seq) const { return seq == seq_ && active_ && !closed_; }

  // One read at a time, whatever the connection is doing: between requests it brings the
  // next one; while a response is pending it keeps pipelined bytes and notices a client
  // that goes away (EOF or an error), which cancels the generation; after the last
  // response it drains until the client's EOF (linger).
  void read() {
    if (reading_ || closed_) return;
    if (!lingering_ && framer_.buffered() >= size_t(srv_.opts.max_header_bytes + srv_.opts.max_body_bytes)) return;
    reading_ = true;
    socket_.async_read_some(net::buffer(rbuf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->on_read(ec, n);
    });
  }

  void on_read(beast::error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (lingering_) {
      lingered_ += n;
      if (ec || lingered_ > kMaxLingerBytes) return close();
      return read();
    }
    if (ec) return disconnected();
    framer_.feed(std::string_view(rbuf_.data(), n));
    if (!active_) next_request();
    read();
  }

  // With no request active: dispatches the next complete request, answers a framing
  // error, or waits for more bytes (100 Continue when the head asked for it).
  void next_request() {
    if (closed_ || active_ || lingering_) return;
    HttpRequest req;
    FramingError err;
    switch (framer_.next(&req, &err)) {
      case RequestFramer::Next::kRequest:
        return dispatch_request(std::move(req));
      case RequestFramer::Next::kError:
        return answer_error(err.status, err.code, err.message);
      case RequestFramer::Next::kNeedMore:
        break;
    }
    if (framer_.in_request() && !request_timer_armed_) {
      // From a request's first byte to its last: the read timeout (not re-armed per
      // byte, so a client trickling bytes cannot hold the connection forever).
      request_timer_armed_ = true;
      arm_read_timer(srv_.opts.read_timeout_ms);
    }
    if (framer_.wants_continue()) {
      framer_.clear_continue();
      queue("HTTP/1.1 100 Continue\r\n\r\n");
      flush();
    }
  }

  void dispatch_request(HttpRequest req) {
    disarm_read_timer();
    request_timer_armed_ = false;
    req.peer = peer_;
    keep_alive_ = framer_.keep_alive() && !srv_.closing.load();
    http10_ = framer_.http10();
    head_only_ = req.method == "HEAD";
    begin_response();
    auto responder = std::make_shared<ConnResponder>(shared_from_this(), seq_);
    dispatch_(req, std::move(responder));
  }

  void begin_response() {
    ++seq_;
    active_ = true;
    started_ = streaming_ = done_ = false;
    srv_.in_flight.fetch_add(1);
  }

  // An answer of the connection's own (a framing error, a timeout, a refusal): written,
  // then the connection closes.
  void answer_error(int status, const std::string& code, const std::string& message) {
    disarm_read_timer();
    ApiError e = bad_request(message, "", code);
    e.status = status;
    if (status >= 500) e.type = "server_error";
    if (status == 503) e.retry_after_ms = 1000;
    keep_alive_ = false;
    http10_ = false;
    head_only_ = false;
    begin_response();
    do_respond(seq_, error_response(e));
  }

  void refuse() {
    answer_error(503,
                 "overloaded",
                 "the server has reached its limit of " + std::to_string(srv_.opts.max_connections) +
                     " open connections; retry later");
  }

  void arm_read_timer(int64_t ms) {
    const uint64_t gen = ++timer_gen_;
    read_timer_.expires_after(std::chrono::milliseconds(std::max<int64_t>(ms, 1)));
    read_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (ec || gen != self->timer_gen_ || self->closed_) return;
      self->on_read_timeout();
    });
  }
  void disarm_read_timer() {
    ++timer_gen_;
    read_timer_.cancel();
  }

  void on_read_timeout() {
    if (lingering_) return close();
    if (active_) return;  // a response is pending: no read deadline applies
    if (framer_.in_request())
      return answer_error(408, "request_timeout",
                          "the request was not received within " + std::to_string(srv_.opts.read_timeout_ms) + " ms");
    close();  // idle between requests
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
    // A reader that stalls for the write timeout is dropped.
    const uint64_t gen = ++write_gen_;
    write_timer_.expires_after(std::chrono::milliseconds(srv_.opts.write_timeout_ms));
    write_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (!ec && gen == self->write_gen_ && self->writing_) self->disconnected();
    });
    net::async_write(socket_, net::buffer(wbuf_), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      ++self->write_gen_;
      self->write_timer_.cancel();
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
    if (!keep_alive_) return linger();
    arm_read_timer(srv_.opts.idle_timeout_ms);
    next_request();  // a pipelined request may be buffered already
    read();
  }

  // After the last response: half-close, then read and discard until the client's EOF, a
  // byte bound or kLinger, and close.
  void linger() {
    lingering_ = true;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    ++timer_gen_;
    const uint64_t gen = timer_gen_;
    read_timer_.expires_after(kLinger);
    read_timer_.async_wait([self = shared_from_this(), gen](beast::error_code e) {
      if (!e && gen == self->timer_gen_) self->close();
    });
    read();
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
    read_timer_.cancel();
    write_timer_.cancel();
    beast::error_code ec;
    socket_.close(ec);
  }

  tcp::socket socket_;
  HttpServer::Impl& srv_;
  Dispatch dispatch_;  // a copy: the listener may go before its connections
  std::string peer_;
  RequestFramer framer_;
  std::array<char, 8192> rbuf_{};
  net::steady_timer read_timer_, write_timer_;
  uint64_t timer_gen_ = 0, write_gen_ = 0;

  uint64_t seq_ = 0;
  bool active_ = false;     // a request is dispatched and its response not finished
  bool started_ = false;    // respond() or start_stream() happened
  bool streaming_ = false;
  bool done_ = false;       // the response's last bytes are queued
  bool keep_alive_ = true;
  bool http10_ = false;
  bool head_only_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool lingering_ = false;
  bool closed_ = false;
  bool request_timer_armed_ = false;
  bool holds_slot_ = false;
  const bool reject_;
  size_t lingered_ = 0;
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

// Accepts connections on one address until closed.
class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // At most this many refusals (503s being written or lingering) at once. Beyond it, while
  // no slot is free either, the listener stops accepting and polls: new connections wait
  // in the kernel's backlog (their SYN is answered, their request bytes kept) until they
  // can be served or answered. A flood costs bounded work and sockets, and no connection
  // is ever closed unanswered.
  static constexpr int64_t kMaxRejecting = 64;
  static constexpr auto kPausePoll = std::chrono::milliseconds(5);

  Listener(HttpServer::Impl& srv, std::shared_ptr<tcp::acceptor> acc, Dispatch d, bool limited)
      : srv_(srv), acc_(std::move(acc)), dispatch_(std::move(d)), limited_(limited), retry_(acc_->get_executor()) {}

  void accept() {
    if (!acc_->is_open()) return;
    if (limited_ && srv_.rejecting.load() >= kMaxRejecting && !srv_.slot_free()) {
      retry_.expires_after(kPausePoll);
      retry_.async_wait([self = shared_from_this()](beast::error_code) { self->accept(); });
      return;
    }
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
        std::make_shared<Connection>(std::move(s), self->srv_, self->dispatch_, false, false)->start();
      } else if (self->srv_.take_slot()) {
        std::make_shared<Connection>(std::move(s), self->srv_, self->dispatch_, true, false)->start();
      } else {
        self->srv_.rejected_connections.fetch_add(1);
        std::make_shared<Connection>(std::move(s), self->srv_, self->dispatch_, false, true)->start();
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
