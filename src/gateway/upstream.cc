#include "gateway/upstream.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/optional.hpp>
#include <mutex>
#include <optional>
#include <vector>

namespace ts::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string_view upstream_error_name(UpstreamError e) {
  switch (e) {
    case UpstreamError::kNone: return "none";
    case UpstreamError::kConnect: return "connect";
    case UpstreamError::kTimeout: return "timeout";
    case UpstreamError::kClosed: return "closed";
    case UpstreamError::kProtocol: return "protocol";
    case UpstreamError::kCancelled: return "cancelled";
  }
  return "unknown";
}

namespace {

// A connection is used by one call at a time; the call's completion handlers run on its
// strand (bind_executor), so the socket itself lives on the io_context.
struct Conn {
  explicit Conn(asio::io_context& io) : stream(io) {}
  beast::tcp_stream stream;
  beast::flat_buffer buf;
  bool connected = false;
};

class Pool;

class Call : public UpstreamCall, public std::enable_shared_from_this<Call> {
 public:
  Call(std::shared_ptr<Pool> pool, asio::io_context& io, UpstreamRequest req, UpstreamHandlers h)
      : pool_(std::move(pool)), io_(io), strand_(asio::make_strand(io)), req_(std::move(req)), h_(std::move(h)) {}

  void start();
  void cancel() override {
    asio::post(strand_, [self = shared_from_this()] { self->finish(UpstreamError::kCancelled, "cancelled"); });
  }

 private:
  void connect();
  void reconnect();  // once: a pooled connection the worker had closed while it was idle
  void write();
  void read_head();
  void read_body();
  void finish(UpstreamError e, const std::string& detail);
  std::chrono::milliseconds ms(int64_t v) const { return std::chrono::milliseconds(v); }

  template <class F>
  auto on_strand(F f) {
    return asio::bind_executor(strand_, std::move(f));
  }

  std::shared_ptr<Pool> pool_;
  asio::io_context& io_;
  asio::strand<asio::io_context::executor_type> strand_;
  UpstreamRequest req_;
  UpstreamHandlers h_;
  std::shared_ptr<Conn> conn_;
  bool reused_ = false, retried_ = false, got_head_ = false, done_ = false;
  http::request<http::string_body> wire_;
  std::optional<http::response_parser<http::buffer_body>> parser_;
  char chunk_[16384];
};

class Pool : public UpstreamPool, public std::enable_shared_from_this<Pool> {
 public:
  Pool(asio::io_context& io, HostPort target, UpstreamConfig t) : io_(io), target_(std::move(target)), t_(t) {}

  std::shared_ptr<UpstreamCall> send(UpstreamRequest req, UpstreamHandlers h) override {
    auto call = std::make_shared<Call>(shared_from_this(), io_, std::move(req), std::move(h));
    call->start();
    return call;
  }
  void close_idle() override {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& c : idle_) {
      beast::error_code ignored;
      c->stream.socket().close(ignored);
    }
    idle_.clear();
  }

  // A pooled connection, or a new one; *reused says which.
  std::shared_ptr<Conn> take(bool* reused) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      while (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        if (!c->stream.socket().is_open()) continue;
        *reused = true;
        return c;
      }
    }
    *reused = false;
    return std::make_shared<Conn>(io_);
  }
  void give_back(std::shared_ptr<Conn> c) {
    c->stream.expires_never();
    if (c->buf.size() > 0) return;  // bytes after the response: not reusable
    std::lock_guard<std::mutex> lk(mu_);
    if (idle_.size() < 64) idle_.push_back(std::move(c));
  }

  const HostPort& target() const { return target_; }
  const UpstreamConfig& timeouts() const { return t_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  tcp::resolver::results_type endpoints_;

 private:
  asio::io_context& io_;
  HostPort target_;
  UpstreamConfig t_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Conn>> idle_;  // GUARDED_BY(mu_)
};

void Call::start() {
  wire_.method_string(req_.method);
  wire_.target(req_.path);
  wire_.version(11);
  wire_.set(http::field::host, pool_->target().host + ":" + pool_->target().port);
  wire_.set(http::field::user_agent, "tierserve-gateway");
  if (!req_.body.empty() || req_.method == "POST") wire_.set(http::field::content_type, req_.content_type);
  for (const auto& [k, v] : req_.headers) wire_.set(k, v);
  wire_.keep_alive(true);
  wire_.body() = req_.body;
  wire_.prepare_payload();
  asio::post(strand_, [self = shared_from_this()] {
    if (self->done_) return;
    self->conn_ = self->pool_->take(&self->reused_);
    if (self->conn_->connected) return self->write();
    self->connect();
  });
}

void Call::connect() {
  conn_->stream.expires_after(ms(pool_->timeouts().connect_timeout_ms));
  conn_->stream.async_connect(pool_->endpoints(), on_strand([self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
    if (self->done_) return;
    if (ec) return self->finish(UpstreamError::kConnect, ec.message());
    self->conn_->connected = true;
    beast::error_code ignored;
    self->conn_->stream.socket().set_option(tcp::no_delay(true), ignored);
    self->write();
  }));
}

void Call::reconnect() {
  retried_ = true;
  reused_ = false;
  beast::error_code ignored;
  conn_->stream.socket().close(ignored);
  conn_ = std::make_shared<Conn>(io_);
  connect();
}

void Call::write() {
  const int64_t head_ms = req_.head_timeout_ms > 0 ? req_.head_timeout_ms : pool_->timeouts().head_timeout_ms;
  conn_->stream.expires_after(ms(head_ms));
  http::async_write(conn_->stream, wire_, on_strand([self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->done_) return;
    if (ec) {
      if (self->reused_ && !self->retried_) return self->reconnect();
      return self->finish(ec == beast::error::timeout ? UpstreamError::kTimeout : UpstreamError::kClosed, ec.message());
    }
    self->read_head();
  }));
}

void Call::read_head() {
  parser_.emplace();
  parser_->body_limit(boost::none);
  parser_->header_limit(64 * 1024);
  http::async_read_header(conn_->stream, conn_->buf, *parser_, on_strand([self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->done_) return;
    if (ec) {
      const bool stale = self->reused_ && !self->retried_ &&
                         (ec == http::error::end_of_stream || ec == asio::error::connection_reset || ec == asio::error::eof);
      if (stale) return self->reconnect();  // the worker closed the idle connection first
      if (ec == beast::error::timeout) return self->finish(UpstreamError::kTimeout, "no response head in time");
      if (ec.category() == beast::error_code(http::error::end_of_stream).category() && ec != http::error::end_of_stream)
        return self->finish(UpstreamError::kProtocol, ec.message());
      return self->finish(UpstreamError::kClosed, ec.message());
    }
    self->got_head_ = true;
    server::Headers hs;
    for (const auto& f : self->parser_->get()) {
      std::string name(f.name_string());
      for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
      hs.emplace_back(std::move(name), std::string(f.value()));
    }
    if (self->h_.on_head) self->h_.on_head(int(self->parser_->get().result_int()), hs);
    self->read_body();
  }));
}

void Call::read_body() {
  if (parser_->is_done()) {
    const bool keep = parser_->keep_alive();
    auto conn = std::move(conn_);
    done_ = true;
    if (keep) pool_->give_back(std::move(conn));
    else {
      beast::error_code ignored;
      conn->stream.socket().close(ignored);
    }
    if (h_.on_end) h_.on_end(UpstreamError::kNone, "");
    h_ = {};
    return;
  }
  auto& body = parser_->get().body();
  body.data = chunk_;
  body.size = sizeof(chunk_);
  conn_->stream.expires_after(ms(pool_->timeouts().idle_timeout_ms));
  http::async_read_some(conn_->stream, conn_->buf, *parser_, on_strand([self = shared_from_this()](beast::error_code ec, size_t) {
    if (self->done_) return;
    const size_t n = sizeof(self->chunk_) - self->parser_->get().body().size;
    if (n && self->h_.on_data) self->h_.on_data(std::string_view(self->chunk_, n));
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::end_of_stream && self->parser_->is_done()) ec = {};
    if (ec) {
      if (ec == beast::error::timeout) return self->finish(UpstreamError::kTimeout, "the response stalled");
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
          ec == http::error::partial_message)
        return self->finish(UpstreamError::kClosed, "the worker closed the connection mid-response");
      return self->finish(UpstreamError::kProtocol, ec.message());
    }
    self->read_body();
  }));
}

void Call::finish(UpstreamError e, const std::string& detail) {
  if (done_) return;
  done_ = true;
  if (conn_) {
    // Closed, not released: a read or write still pending on it completes (aborted) into
    // the connection's buffer, so the connection lives as long as the call, whose pending
    // handlers hold it.
    beast::error_code ignored;
    conn_->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    conn_->stream.socket().close(ignored);
  }
  if (h_.on_end) h_.on_end(e, detail);
  h_ = {};  // drop the captures (they hold the client's exchange)
}

}  // namespace

Result<std::shared_ptr<UpstreamPool>> UpstreamPool::create(asio::io_context& io, const HostPort& target,
                                                           const UpstreamConfig& timeouts) {
  auto p = std::make_shared<Pool>(io, target, timeouts);
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  p->endpoints_ = resolver.resolve(target.host, target.port, ec);
  if (ec) return invalid_argument("cannot resolve " + target.host + ":" + target.port + ": " + ec.message());
  return std::shared_ptr<UpstreamPool>(p);
}

}  // namespace ts::gateway
