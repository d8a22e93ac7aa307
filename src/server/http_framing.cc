#include "server/http_framing.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cctype>
#include <optional>

namespace ts::server {

namespace beast = boost::beast;
namespace http = beast::http;

struct RequestFramer::Parser {
  http::request_parser<http::string_body> p;
  size_t consumed = 0;  // bytes of the current request the parser has taken
};

namespace {

FramingError error(int status, std::string code, std::string message) {
  return FramingError{status, std::move(code), std::move(message)};
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The transfer codings of every Transfer-Encoding header, in order (empty list elements
// dropped, parameters kept as part of the coding: "chunked;x=1" is not chunked).
std::vector<std::string> transfer_codings(const http::request<http::string_body>& m) {
  std::vector<std::string> out;
  for (const auto& f : m) {
    if (f.name() != http::field::transfer_encoding) continue;
    std::string_view v(f.value().data(), f.value().size());
    while (!v.empty()) {
      const size_t comma = v.find(',');
      const std::string_view item = trim(v.substr(0, comma));
      if (!item.empty()) out.emplace_back(item);
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  return out;
}

FramingError from_beast(const beast::error_code& ec, const FramingLimits& lim) {
  if (ec == http::error::header_limit)
    return error(431, "header_too_large", "request headers exceed " + std::to_string(lim.max_header_bytes) + " bytes");
  if (ec == http::error::body_limit)
    return error(413, "body_too_large", "request body exceeds " + std::to_string(lim.max_body_bytes) + " bytes");
  if (ec == http::error::bad_content_length || ec == http::error::multiple_content_length)
    return error(400, "bad_content_length", "malformed HTTP request: bad Content-Length");
  if (ec == http::error::bad_transfer_encoding)
    return error(400, "bad_transfer_encoding", "malformed HTTP request: bad Transfer-Encoding");
  if (ec == http::error::bad_chunk || ec == http::error::bad_chunk_extension)
    return error(400, "bad_chunk", "malformed HTTP request: bad chunk in a chunked body");
  return error(400, "bad_request", "malformed HTTP request: " + ec.message());
}

// Beast stops at the first bad byte of a head; where the head itself says more precisely
// what is wrong, say that: a version other than 1.x (505), or Content-Length together
// with Transfer-Encoding (which Beast reports as a bad value of whichever came second).
FramingError head_error(const beast::error_code& ec, std::string_view head, const FramingLimits& lim) {
  const size_t eol = head.find("\r\n");
  if (ec == http::error::bad_version) {
    // The eight bytes after "METHOD SP target SP", which Beast has judged, as Beast reads
    // them: a well-formed version other than 1.0 and 1.1 is unsupported, not malformed.
    const size_t sp1 = head.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : head.find(' ', sp1 + 1);
    if (sp2 != std::string_view::npos && sp2 + 9 <= head.size()) {
      const std::string_view v = head.substr(sp2 + 1, 8);
      if (v.substr(0, 5) == "HTTP/" && std::isdigit(static_cast<unsigned char>(v[5])) && v[6] == '.' &&
          std::isdigit(static_cast<unsigned char>(v[7])) && v != "HTTP/1.0" && v != "HTTP/1.1")
        return error(505, "http_version_not_supported",
                     "HTTP version " + std::string(v.substr(5)) + " is not supported (HTTP/1.0 and 1.1 only)");
    }
  }
  if (ec == http::error::bad_content_length || ec == http::error::bad_transfer_encoding) {
    bool cl = false, te = false;
    for (size_t p = eol; p != std::string_view::npos && p + 2 < head.size();) {
      const size_t next = head.find("\r\n", p + 2);
      const std::string_view h = head.substr(p + 2, next == std::string_view::npos ? std::string_view::npos : next - p - 2);
      const size_t colon = h.find(':');
      if (colon != std::string_view::npos) {
        cl = cl || iequal(h.substr(0, colon), "content-length");
        te = te || iequal(h.substr(0, colon), "transfer-encoding");
      }
      if (h.empty()) break;
      p = next;
    }
    if (cl && te) return error(400, "conflicting_framing", "the request has both Transfer-Encoding and Content-Length");
  }
  return from_beast(ec, lim);
}

}  // namespace

RequestFramer::RequestFramer(const FramingLimits& limits) : limits_(limits) { reset_parser(); }
RequestFramer::~RequestFramer() = default;

void RequestFramer::reset_parser() {
  parser_ = std::make_unique<Parser>();
  // next() enforces max_header_bytes itself; Beast's own limit only bounds its work.
  parser_->p.header_limit(uint32_t(std::clamp<int64_t>(limits_.max_header_bytes + 8, 1, UINT32_MAX)));
  parser_->p.body_limit(uint64_t(std::max<int64_t>(limits_.max_body_bytes, 0)));
  parser_->p.eager(false);  // stop after the head: check_head() runs before the body is read
  head_checked_ = false;
  continue_pending_ = false;
  head_scan_ = 0;
}

void RequestFramer::feed(std::string_view bytes) {
  if (failed_) return;
  // Drop what is consumed, but keep the current request's head until it is checked
  // (check_head() and head_error() read it again).
  const size_t keep_from = head_checked_ ? pos_ : pos_ - parser_->consumed;
  if (keep_from > 0 && keep_from >= buf_.size() / 2) {
    buf_.erase(0, keep_from);
    pos_ -= keep_from;
    head_scan_ -= std::min(head_scan_, keep_from);
  }
  buf_.append(bytes);
}

size_t RequestFramer::buffered() const { return buf_.size() - pos_; }

bool RequestFramer::in_request() const {
  if (failed_) return false;
  return parser_->consumed > 0 || buffered() > 0;
}

bool RequestFramer::wants_continue() const { return continue_pending_ && !failed_; }
void RequestFramer::clear_continue() { continue_pending_ = false; }

bool RequestFramer::check_head(FramingError* err) {
  const auto& m = parser_->p.get();
  // obs-fold (a header line continued on the next line) is refused, not unfolded: a
  // proxy in front may read the same bytes differently (RFC 9112 §5.2).
  const std::string_view head = std::string_view(buf_).substr(pos_ - parser_->consumed, parser_->consumed);
  for (size_t p = head.find("\r\n"); p != std::string_view::npos && p + 2 < head.size(); p = head.find("\r\n", p + 2)) {
    if (head[p + 2] == ' ' || head[p + 2] == '\t') {
      *err = error(400, "bad_request", "malformed HTTP request: a header line continued on the next line (obs-fold)");
      return false;
    }
  }
  const unsigned version = m.version();  // 10 or 11: Beast refuses others (head_error: 505)
  // Framing: Transfer-Encoding and Content-Length.
  const std::vector<std::string> te = transfer_codings(m);
  size_t n_cl = 0, n_host = 0, n_te_headers = 0;
  std::string_view cl;
  for (const auto& f : m) {
    if (f.name() == http::field::content_length) ++n_cl, cl = std::string_view(f.value().data(), f.value().size());
    if (f.name() == http::field::host) ++n_host;
    if (f.name() == http::field::transfer_encoding) ++n_te_headers;
  }
  if (n_te_headers > 0) {
    if (version < 11) {
      *err = error(400, "bad_transfer_encoding", "Transfer-Encoding is not allowed in an HTTP/1.0 request");
      return false;
    }
    if (te.empty() || !iequal(te.back(), "chunked")) {
      *err = error(400, "bad_transfer_encoding",
                   "the request's Transfer-Encoding does not end in 'chunked': its body length cannot be determined");
      return false;
    }
    for (size_t i = 0; i + 1 < te.size(); ++i) {
      if (iequal(te[i], "chunked")) {
        *err = error(400, "bad_transfer_encoding", "'chunked' may be applied only once");
        return false;
      }
    }
    if (te.size() > 1) {
      *err = error(501, "unsupported_transfer_encoding",
                   "transfer coding '" + te.front() + "' is not implemented (only 'chunked' is)");
      return false;
    }
    if (n_cl > 0) {
      *err = error(400, "conflicting_framing", "the request has both Transfer-Encoding and Content-Length");
      return false;
    }
  }
  if (n_cl > 1) {
    *err = error(400, "bad_content_length", "the request has more than one Content-Length");
    return false;
  }
  if (n_cl == 1 && (cl.empty() || cl.find_first_not_of("0123456789") != std::string_view::npos)) {
    *err = error(400, "bad_content_length", "Content-Length must be a decimal number");
    return false;
  }
  if (version >= 11 && n_host != 1) {
    *err = error(400, "bad_host", n_host == 0 ? "an HTTP/1.1 request needs a Host header" : "the request has more than one Host header");
    return false;
  }
  // Target form.
  const std::string_view target(m.target().data(), m.target().size());
  const bool origin = !target.empty() && target.front() == '/';
  const bool asterisk = target == "*" && m.method() == http::verb::options;
  const bool absolute = target.size() > 7 && (iequal(target.substr(0, 7), "http://") || iequal(target.substr(0, 8), "https://"));
  if (!origin && !asterisk && !absolute) {
    *err = error(400, "bad_target", "the request target must be a path starting with '/'");
    return false;
  }
  continue_pending_ = version >= 11 && [&] {
    auto it = m.find(http::field::expect);
    return it != m.end() && beast::iequals(it->value(), "100-continue");
  }();
  return true;
}

RequestFramer::Next RequestFramer::next(HttpRequest* req, FramingError* err) {
  if (failed_) {
    *err = error_;
    return Next::kError;
  }
  auto fail = [&](FramingError e) {
    failed_ = true;
    error_ = std::move(e);
    *err = error_;
    return Next::kError;
  };
  auto& p = parser_->p;
  for (;;) {
    if (p.is_header_done() && !head_checked_) {
      head_checked_ = true;
      FramingError e;
      if (!check_head(&e)) return fail(std::move(e));
      p.eager(true);
    }
    if (p.is_done()) break;
    if (pos_ >= buf_.size()) return Next::kNeedMore;
    if (!p.is_header_done()) {
      // The head's size is judged here, from its bytes alone: Beast counts its limit from
      // wherever a read began, so its verdict would depend on how the bytes arrived.
      const size_t start = pos_ - parser_->consumed;
      head_scan_ = std::max(head_scan_, start);
      const size_t end = buf_.find("\r\n\r\n", head_scan_);
      head_scan_ = end == std::string::npos ? std::max(start, buf_.size() - std::min<size_t>(buf_.size(), 3)) : end;
      const size_t have = end == std::string::npos ? buf_.size() - start : end + 4 - start;
      if (have > size_t(limits_.max_header_bytes)) return fail(from_beast(http::error::header_limit, limits_));
    }
    beast::error_code ec;
    const size_t n = p.put(boost::asio::const_buffer(buf_.data() + pos_, buf_.size() - pos_), ec);
    pos_ += n;
    parser_->consumed += n;
    if (ec == http::error::need_more) {
      if (p.is_header_done() && !head_checked_) continue;
      return Next::kNeedMore;
    }
    if (ec) {
      if (!p.is_header_done()) return fail(head_error(ec, std::string_view(buf_).substr(pos_ - parser_->consumed), limits_));
      if (p.chunked() && ec != http::error::body_limit) return fail(from_beast(http::error::bad_chunk, limits_));
      return fail(from_beast(ec, limits_));
    }
    // A body begins: the client did not wait for "100 Continue" (or got it).
    if (head_checked_ && n > 0) continue_pending_ = false;
  }

  http::request<http::string_body> msg = p.release();
  HttpRequest out;
  out.method = std::string(msg.method_string());
  std::string target(msg.target());
  if (target.front() != '/' && target != "*") {  // absolute-form: keep the path and query
    const size_t authority = target.find("//") + 2;
    const size_t path = target.find_first_of("/?", authority);
    target = path == std::string::npos ? "/" : target.substr(path);
    if (target.front() == '?') target.insert(0, "/");
  }
  const size_t q = target.find('?');
  out.path = target.substr(0, q);
  if (q != std::string::npos) out.query = target.substr(q + 1);
  for (const auto& f : msg) {
    std::string name(f.name_string());
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    out.headers.emplace_back(std::move(name), std::string(f.value()));
  }
  out.body = std::move(msg.body());
  keep_alive_ = msg.keep_alive();
  http10_ = msg.version() < 11;
  *req = std::move(out);
  reset_parser();
  return Next::kRequest;
}

}  // namespace ts::server
