#include "client.h"

#include <boost/asio/connect.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/optional.hpp>

#include "response.h"

namespace ts::bench {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpClient::Conn {
  explicit Conn(asio::io_context& io) : stream(io) {}
  beast::tcp_stream stream;
  beast::flat_buffer buf;
  bool connected = false;
};

struct HttpClient::Op {
  WireRequest wire;
  RequestRecord rec;
  Done done;
  std::shared_ptr<Conn> conn;
  bool reused = false;
  bool retried = false;
  bool got_response = false;
  http::request<http::string_body> req;
  std::optional<http::response_parser<http::buffer_body>> parser;
  std::optional<ResponseReader> reader;
  char chunk[16384];
};

Result<Target> parse_url(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("https://", 0) == 0) return invalid_argument("https is not supported (" + url + "); use http://");
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  Target t;
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  t.base_path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
  // A base URL that already ends in /v1 is common (OpenAI clients want it that way).
  if (t.base_path.size() >= 3 && t.base_path.compare(t.base_path.size() - 3, 3, "/v1") == 0)
    t.base_path.resize(t.base_path.size() - 3);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) {
    t.host = hostport;
    t.port = "80";
  } else {
    t.host = hostport.substr(0, colon);
    t.port = hostport.substr(colon + 1);
  }
  if (t.host.size() > 2 && t.host.front() == '[' && t.host.back() == ']') t.host = t.host.substr(1, t.host.size() - 2);
  if (t.host.empty() || t.port.empty() || t.port.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument("bad URL '" + url + "' (want http://host:port)");
  return t;
}

HttpClient::HttpClient(asio::io_context& io, Target t, const Clock& clock, double timeout_s)
    : io_(io), target_(std::move(t)), clock_(clock), timeout_s_(timeout_s) {}

HttpClient::~HttpClient() = default;

Result<std::unique_ptr<HttpClient>> HttpClient::create(asio::io_context& io, Target t, const Clock& clock,
                                                       double timeout_s) {
  std::unique_ptr<HttpClient> c(new HttpClient(io, std::move(t), clock, timeout_s));
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  c->endpoints_ = resolver.resolve(c->target_.host, c->target_.port, ec);
  if (ec) return invalid_argument("cannot resolve " + c->target_.host + ":" + c->target_.port + ": " + ec.message());
  return c;
}

std::shared_ptr<HttpClient::Conn> HttpClient::take_conn(bool* reused) {
  while (!idle_.empty()) {
    auto c = std::move(idle_.back());
    idle_.pop_back();
    if (c->stream.socket().is_open()) {
      *reused = true;
      return c;
    }
  }
  *reused = false;
  ++n_opened_;
  return std::make_shared<Conn>(io_);
}

void HttpClient::give_back(std::shared_ptr<Conn> c) {
  c->stream.expires_never();
  c->buf.consume(c->buf.size());
  idle_.push_back(std::move(c));
}

void HttpClient::send(WireRequest wire, RequestRecord rec, Done done) {
  auto op = std::make_shared<Op>();
  op->wire = std::move(wire);
  op->rec = std::move(rec);
  op->done = std::move(done);
  op->req.method(http::verb::post);
  op->req.target(target_.base_path + op->wire.path);
  op->req.version(11);
  op->req.set(http::field::host, target_.host + ":" + target_.port);
  op->req.set(http::field::content_type, "application/json");
  op->req.set(http::field::accept, op->rec.streamed ? "text/event-stream" : "application/json");
  op->req.set(http::field::user_agent, "tierserve-bench");
  if (!op->wire.api_key.empty()) op->req.set(http::field::authorization, "Bearer " + op->wire.api_key);
  if (!target_.model_version.empty()) op->req.set("x-tierserve-model-version", target_.model_version);
  op->req.keep_alive(true);
  op->req.body() = op->wire.body;
  op->req.prepare_payload();
  op->rec.sent_ns = clock_.now_ns();
  start(std::move(op));
}

void HttpClient::start(std::shared_ptr<Op> op) {
  if (op->retried) {
    // The retry of a request that failed on a stale pooled connection: other pooled
    // connections went idle at the same time and are likely closed too.
    op->conn = std::make_shared<Conn>(io_);
    op->reused = false;
    ++n_opened_;
  } else {
    op->conn = take_conn(&op->reused);
  }
  op->parser.emplace();
  op->parser->body_limit(boost::none);
  op->reader.emplace(&op->rec);
  auto& stream = op->conn->stream;
  stream.expires_after(std::chrono::nanoseconds(int64_t(timeout_s_ * 1e9)));
  auto write = [this, op]() {
    http::async_write(op->conn->stream, op->req, [this, op](beast::error_code ec, size_t) {
      if (ec) return fail(op, ec == beast::error::timeout ? "timeout" : "write", ec.message(), true);
      http::async_read_header(op->conn->stream, op->conn->buf, *op->parser, [this, op](beast::error_code ec, size_t) {
        if (ec) return fail(op, ec == beast::error::timeout ? "timeout" : "read", ec.message(), true);
        op->got_response = true;
        auto& res = op->parser->get();
        op->reader->on_status(int(res.result_int()));
        for (const auto& f : res) {
          std::string name(f.name_string());
          for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
          op->reader->on_header(name, std::string_view(f.value().data(), f.value().size()));
        }
        read_body(op);
      });
    });
  };
  if (op->conn->connected) return write();
  stream.async_connect(endpoints_, [this, op, write](beast::error_code ec, const tcp::endpoint&) {
    if (ec) return fail(op, ec == beast::error::timeout ? "timeout" : "connect", ec.message(), false);
    op->conn->connected = true;
    op->conn->stream.socket().set_option(tcp::no_delay(true));
    write();
  });
}

void HttpClient::read_body(std::shared_ptr<Op> op) {
  if (op->parser->is_done()) {
    op->reader->on_end(clock_.now_ns());
    const bool keep = op->parser->keep_alive();
    if (keep) give_back(op->conn);
    else op->conn->stream.close();
    op->conn.reset();
    op->done(std::move(op->rec));
    return;
  }
  auto& body = op->parser->get().body();
  body.data = op->chunk;
  body.size = sizeof(op->chunk);
  http::async_read_some(op->conn->stream, op->conn->buf, *op->parser, [this, op](beast::error_code ec, size_t) {
    const size_t n = sizeof(op->chunk) - op->parser->get().body().size;
    if (n) op->reader->on_body(std::string_view(op->chunk, n), clock_.now_ns());
    if (ec == http::error::need_buffer) ec = {};
    if (ec == http::error::end_of_stream && op->parser->is_done()) ec = {};
    if (ec) return fail(op, ec == beast::error::timeout ? "timeout" : "read", ec.message(), false);
    read_body(op);
  });
}

void HttpClient::fail(std::shared_ptr<Op> op, const char* type, const std::string& detail, bool before_response) {
  beast::error_code ignored;
  op->conn->stream.socket().close(ignored);
  op->conn.reset();
  // An idle keep-alive connection the server already closed: not the server's failure
  // to answer, so try once more on a new connection.
  if (before_response && op->reused && !op->retried && !op->got_response) {
    op->retried = true;
    op->rec.http_status = 0;
    return start(std::move(op));
  }
  op->rec.end_ns = clock_.now_ns();
  op->rec.error = type;
  op->rec.error_detail = detail;
  op->done(std::move(op->rec));
}

}  // namespace ts::bench
