#include "server/app.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "metrics/prometheus.h"
#include "metrics/tierserve_metrics.h"
#include "server/api_error.h"

namespace ts::server {

std::string format_reset(int64_t ms) {
  if (ms < 0) ms = 0;
  if (ms < 1000) return std::to_string(ms) + "ms";
  char buf[48];
  if (ms < 60000) {
    std::snprintf(buf, sizeof buf, "%gs", double(ms) / 1000.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lldm%gs", (long long)(ms / 60000), double(ms % 60000) / 1000.0);
  }
  return buf;
}

HttpResponse loading_response(const HttpRequest& req) {
  if (req.path == "/health/live") {
    HttpResponse r;
    r.body = R"({"status":"live"})";
    return r;
  }
  if (req.path == "/health/ready") {
    HttpResponse r;
    r.status = 503;
    r.body = R"({"status":"loading"})";
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  ApiError e = server_error(503, "the model is loading", "loading");
  e.retry_after_ms = 1000;
  return error_response(e);
}

App::App(const ServerConfig& cfg, Backend& backend, metrics::Registry* registry, const Clock& clock, std::string model_id)
    : cfg_(cfg), backend_(backend), registry_(registry), clock_(clock), model_id_(std::move(model_id)), keys_(cfg.keys, clock) {
  main_.add("POST", "/v1/chat/completions",
            [this](const HttpRequest& r, std::shared_ptr<Responder> o) { completions(r, std::move(o), Endpoint::kChat); });
  main_.add("POST", "/v1/completions",
            [this](const HttpRequest& r, std::shared_ptr<Responder> o) { completions(r, std::move(o), Endpoint::kCompletions); });
  main_.add("GET", "/v1/models", [this](const HttpRequest&, std::shared_ptr<Responder> o) { models(std::move(o)); });
  const bool separate_admin = cfg_.admin.port >= 0;
  for (Router* r : {&main_, &admin_}) {
    r->add("GET", "/health/live", [this](const HttpRequest&, std::shared_ptr<Responder> o) { health(std::move(o), false); });
    r->add("GET", "/health/ready", [this](const HttpRequest&, std::shared_ptr<Responder> o) { health(std::move(o), true); });
    if (r == &admin_ || !separate_admin) {
      r->add("GET", "/metrics", [this](const HttpRequest&, std::shared_ptr<Responder> o) { metrics_text(std::move(o)); });
      r->add("GET", "/admin/stats", [this](const HttpRequest&, std::shared_ptr<Responder> o) { stats(std::move(o)); });
    }
  }
}

void App::handle(const HttpRequest& req, std::shared_ptr<Responder> out, Listener l) const {
  const bool open_route = req.path == "/health/live" || req.path == "/health/ready";
  if (keys_.enabled() && !open_route) {
    const std::string_view auth = req.header("authorization");
    if (auth.empty()) {
      out->respond(error_response(unauthorized("missing API key: send the header 'Authorization: Bearer KEY'")));
      return;
    }
    if (!keys_.authenticate(auth)) {
      out->respond(error_response(unauthorized("invalid API key")));
      return;
    }
  }
  (l == Listener::kMain ? main_ : admin_).dispatch(req, std::move(out));
}

std::string App::resolve_tier(const std::string& service_tier) const {
  for (const auto& t : cfg_.sched.tiers)
    if (t.name == service_tier) return t.name;
  if (auto it = cfg_.tier_aliases.find(service_tier); it != cfg_.tier_aliases.end()) return it->second;
  return "";
}

int32_t App::tier_priority(const std::string& name) const {
  for (const auto& t : cfg_.sched.tiers)
    if (t.name == name) return t.priority;
  return -1;
}

void App::count_rejection(const std::string& tier) const {
  if (!registry_) return;
  const int f = registry_->find("tierserve_requests_total");
  if (f >= 0) registry_->counter(size_t(f), {tier, "rejected"})->inc();
}

void App::count_degradation(const std::string& from, const std::string& to, const std::string& reason) const {
  if (!registry_) return;
  const int f = registry_->find("tierserve_degradations_total");
  if (f >= 0) registry_->counter(size_t(f), {from, to, reason})->inc();
}

void App::models(std::shared_ptr<Responder> out) const {
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json tiers = nlohmann::json::array();
  for (const auto& t : cfg_.sched.tiers) tiers.push_back(t.name);
  nlohmann::json m = {{"id", model_id_}, {"object", "model"}, {"created", created}, {"owned_by", "tierserve"},
                      {"tierserve", {{"tiers", tiers}, {"max_seq_len", backend_.max_seq_len()}}}};
  HttpResponse r;
  r.body = nlohmann::json{{"object", "list"}, {"data", nlohmann::json::array({m})}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
  out->respond(std::move(r));
}

void App::metrics_text(std::shared_ptr<Responder> out) const {
  if (registry_ && connection_stats_) {
    const ConnectionStats c = connection_stats_();
    registry_->gauge(metrics::idx(metrics::Metric::kHttpConnectionsOpen), {})->set(double(c.open));
    std::lock_guard<std::mutex> lk(conn_mu_);
    const uint64_t total = c.rejected;
    if (total > conn_rejected_seen_) {
      registry_->counter(metrics::idx(metrics::Metric::kHttpConnectionsRejected), {})->inc(total - conn_rejected_seen_);
      conn_rejected_seen_ = total;
    }
  }
  HttpResponse r;
  r.content_type = std::string(metrics::kPrometheusContentType);
  if (registry_) r.body = metrics::format_prometheus(registry_->snapshot());
  out->respond(std::move(r));
}

void App::stats(std::shared_ptr<Responder> out) const {
  const serving::Stats s = backend_.stats();
  nlohmann::json j = {{"draining", s.draining || draining()},
                      {"n_active", s.n_active},
                      {"n_engine_seqs", s.n_engine_seqs},
                      {"n_steps", s.n_steps},
                      {"n_steps_interrupted", s.n_interrupted},
                      {"n_steps_forced_exclusive", s.n_forced_exclusive},
                      {"step_token_budget", s.step_token_budget},
                      {"speculative", {{"drafted", s.n_drafted}, {"accepted", s.n_draft_accepted}}},
                      {"kv",
                       {{"block_size", s.kv.block_size},
                        {"total", s.kv.total},
                        {"used", s.kv.used},
                        {"cached", s.kv.cached},
                        {"free", s.kv.free},
                        {"bytes", s.kv.bytes}}}};
  if (connection_stats_) {
    const ConnectionStats c = connection_stats_();
    j["connections"] = {{"open", c.open}, {"max", c.max}, {"rejected", c.rejected}};
  }
  if (s.step_cost.measured()) {
    j["step_cost"] = {{"fixed_ms", s.step_cost.fixed_ns / 1e6},
                      {"token_ms", s.step_cost.token_ns / 1e6},
                      {"output_ms", s.step_cost.output_ns / 1e6},
                      {"pair_ns", s.step_cost.pair_ns},
                      {"n_layers", s.step_cost.n_layers},
                      {"scale", s.step_cost_scale},
                      {"segment_ms", s.step_cost.segment_ns(s.step_token_budget, 0) / 1e6}};
    nlohmann::json bounds = nlohmann::json::object();
    for (const auto& [tier, ns] : s.wait_bound_ns) bounds[tier] = double(ns) / 1e6;
    j["wait_bound_ms"] = bounds;
  }
  HttpResponse r;
  r.body = j.dump();
  out->respond(std::move(r));
}

void App::health(std::shared_ptr<Responder> out, bool ready_check) const {
  HttpResponse r;
  if (!ready_check) {
    r.body = R"({"status":"live"})";
  } else if (draining()) {
    r.status = 503;
    r.body = R"({"status":"draining"})";
    r.headers.emplace_back("Retry-After", "5");
  } else if (!ready_.load()) {
    r.status = 503;
    r.body = R"({"status":"loading"})";
  } else {
    r.body = R"({"status":"ready"})";
  }
  out->respond(std::move(r));
}

}  // namespace ts::server
