#include "server/access_log.h"

#include <cctype>
#include <random>

#include "core/log.h"
#include "server/api_error.h"
#include "server/router.h"

namespace ts::server {

std::string request_id_for(std::string_view incoming) {
  bool ok = !incoming.empty() && incoming.size() <= 128;
  for (unsigned char c : incoming) ok = ok && c > 0x20 && c < 0x7f;
  if (ok) return std::string(incoming);
  thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (int w = 0; w < 2; ++w)
    for (uint64_t v = rng(), i = 0; i < 16; ++i, v >>= 4) id.push_back(kHex[v & 15]);
  return id;
}

std::string trace_id_of(std::string_view tp) {
  // version "00": exactly 55 characters.
  if (tp.size() != 55 || tp.substr(0, 3) != "00-" || tp[35] != '-' || tp[52] != '-') return "";
  auto hex = [&](size_t from, size_t n) {
    bool nonzero = false;
    for (size_t i = from; i < from + n; ++i) {
      const char c = tp[i];
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
      nonzero = nonzero || c != '0';
    }
    return nonzero || n == 2;
  };
  if (!hex(3, 32) || !hex(36, 16) || !hex(53, 2)) return "";
  return std::string(tp.substr(3, 32));
}

std::string error_code_of(std::string_view body) {
  const size_t e = body.find("\"error\"");
  if (e == std::string_view::npos) return "";
  const std::string_view key = "\"code\":\"";
  const size_t k = body.find(key, e);
  if (k == std::string_view::npos) return "";
  const size_t from = k + key.size(), to = body.find('"', from);
  if (to == std::string_view::npos || to - from > 64) return "";
  return std::string(body.substr(from, to - from));
}

AccessLogResponder::AccessLogResponder(std::shared_ptr<Responder> inner, std::shared_ptr<AccessRecord> rec,
                                       const Clock& clock, bool log)
    : inner_(std::move(inner)), rec_(std::move(rec)), clock_(clock), start_ns_(clock.now_ns()), log_(log) {}

void AccessLogResponder::respond(HttpResponse r) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    rec_->status = r.status;
    if (r.status >= 400 && rec_->error_code.empty()) rec_->error_code = error_code_of(r.body);
  }
  r.headers.emplace_back("x-request-id", rec_->request_id);
  write_line();
  inner_->respond(std::move(r));
}

void AccessLogResponder::start_stream(HttpResponse head) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    rec_->status = head.status;
  }
  head.headers.emplace_back("x-request-id", rec_->request_id);
  inner_->start_stream(std::move(head));
}

void AccessLogResponder::send(std::string data) {
  if (data.rfind("data: {\"error\"", 0) == 0) {
    std::lock_guard<std::mutex> lk(mu_);
    if (rec_->error_code.empty()) rec_->error_code = error_code_of(data);
  }
  inner_->send(std::move(data));
}

void AccessLogResponder::end() {
  write_line();
  inner_->end();
}

void AccessLogResponder::on_disconnect(std::function<void()> fn) { inner_->on_disconnect(std::move(fn)); }

void AccessLogResponder::write_line() {
  if (!log_ || written_.exchange(true)) return;
  std::lock_guard<std::mutex> lk(mu_);
  const AccessRecord& r = *rec_;
  std::vector<LogField> f;
  f.emplace_back("request_id", r.request_id);
  if (!r.trace_id.empty()) f.emplace_back("trace_id", r.trace_id);
  if (!r.key_name.empty()) f.emplace_back("key", r.key_name);
  f.emplace_back("route", r.route);
  if (!r.model.empty()) f.emplace_back("model", r.model);
  if (!r.model_version.empty()) f.emplace_back("model_version", r.model_version);
  if (!r.tier_requested.empty()) f.emplace_back("tier_requested", r.tier_requested);
  if (!r.tier_served.empty()) f.emplace_back("tier_served", r.tier_served);
  if (!r.degraded_reason.empty()) f.emplace_back("degraded_reason", r.degraded_reason);
  f.emplace_back("status", r.status);
  if (!r.error_code.empty()) f.emplace_back("error", r.error_code);
  if (r.prompt_tokens >= 0) f.emplace_back("prompt_tokens", r.prompt_tokens);
  if (r.completion_tokens >= 0) f.emplace_back("completion_tokens", r.completion_tokens);
  if (r.cached_tokens >= 0) f.emplace_back("cached_tokens", r.cached_tokens);
  if (r.queue_ms >= 0) f.emplace_back("queue_ms", r.queue_ms);
  if (r.ttft_ms >= 0) f.emplace_back("ttft_ms", r.ttft_ms);
  f.emplace_back("e2e_ms", double(clock_.now_ns() - start_ns_) / 1e6);
  if (r.preemptions >= 0) f.emplace_back("preemptions", r.preemptions);
  f.emplace_back("client", r.client);
  log_record(LogLevel::kInfo, "access", f);
}

OpenedExchange open_exchange(const HttpRequest& req, std::shared_ptr<Responder> raw, const KeyTable& keys, const Clock& clock,
                             bool log_access) {
  const bool open_route = req.path == "/health" || req.path == "/health/live" || req.path == "/health/ready";
  auto rec = std::make_shared<AccessRecord>();
  rec->request_id = request_id_for(req.header("x-request-id"));
  rec->trace_id = trace_id_of(req.header("traceparent"));
  rec->route = req.method + " " + req.path;
  rec->client = req.peer;
  const bool logged = log_access && !open_route && req.path != "/metrics";
  OpenedExchange x;
  x.rec = rec.get();
  x.out = std::make_shared<AccessLogResponder>(std::move(raw), rec, clock, logged);
  if (!keys.enabled() || open_route) return x;
  const std::string_view auth = req.header("authorization");
  if (auth.empty()) {
    x.out->respond(error_response(unauthorized("missing API key: send the header 'Authorization: Bearer KEY'")));
    return {};
  }
  x.key = keys.authenticate(auth);
  if (!x.key) {
    x.out->respond(error_response(unauthorized("invalid API key")));
    return {};
  }
  rec->key_name = x.key->config().name;
  return x;
}

}  // namespace ts::server
