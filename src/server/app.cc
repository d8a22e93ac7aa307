#include "server/app.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "core/cpu_features.h"
#include "kernels/traits.h"
#include "metrics/process.h"
#include "metrics/prometheus.h"
#include "server/tier_names.h"
#include "metrics/tierserve_metrics.h"
#include "server/access_log.h"
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
    : cfg_(cfg),
      backend_(backend),
      registry_(registry),
      clock_(clock),
      model_names_(cfg.model.served_names.empty() ? std::vector<std::string>{std::move(model_id)} : cfg.model.served_names),
      keys_(cfg.keys, clock) {
  // By rank, as serving numbers them (sorted by priority, which config validation keeps unique).
  std::vector<const sched::TierConfig*> by_priority;
  for (const auto& t : cfg_.sched.tiers) by_priority.push_back(&t);
  std::stable_sort(by_priority.begin(), by_priority.end(),
                   [](const sched::TierConfig* a, const sched::TierConfig* b) { return a->priority < b->priority; });
  for (const sched::TierConfig* t : by_priority) tier_names_.push_back(t->name);
  main_.add("POST", "/v1/chat/completions",
            [this](const HttpRequest& r, std::shared_ptr<Responder> o) { completions(r, std::move(o), Endpoint::kChat); });
  main_.add("POST", "/v1/completions",
            [this](const HttpRequest& r, std::shared_ptr<Responder> o) { completions(r, std::move(o), Endpoint::kCompletions); });
  main_.add("GET", "/v1/models", [this](const HttpRequest&, std::shared_ptr<Responder> o) { models(std::move(o)); });
  main_.add_prefix("GET", "/v1/models/", [this](const HttpRequest& r, std::shared_ptr<Responder> o) { model(r, std::move(o)); });
  main_.add("POST", "/tokenize", [this](const HttpRequest& r, std::shared_ptr<Responder> o) { tokenize(r, std::move(o)); });
  main_.add("POST", "/detokenize", [this](const HttpRequest& r, std::shared_ptr<Responder> o) { detokenize(r, std::move(o)); });
  const bool separate_admin = cfg_.admin.port >= 0;
  for (Router* r : {&main_, &admin_}) {
    r->add("GET", "/health", [this](const HttpRequest&, std::shared_ptr<Responder> o) { health(std::move(o), true); });
    r->add("GET", "/health/live", [this](const HttpRequest&, std::shared_ptr<Responder> o) { health(std::move(o), false); });
    r->add("GET", "/health/ready", [this](const HttpRequest&, std::shared_ptr<Responder> o) { health(std::move(o), true); });
    if (r == &admin_ || !separate_admin) {
      r->add("GET", "/metrics", [this](const HttpRequest&, std::shared_ptr<Responder> o) { metrics_text(std::move(o)); });
      r->add("GET", "/admin/stats", [this](const HttpRequest&, std::shared_ptr<Responder> o) { stats(std::move(o)); });
    }
  }
}

void App::handle(const HttpRequest& req, std::shared_ptr<Responder> raw, Listener l) const {
  OpenedExchange x = open_exchange(req, std::move(raw), keys_, clock_, cfg_.log.access);
  if (!x.out) return;  // 401 sent
  (l == Listener::kMain ? main_ : admin_).dispatch(req, std::move(x.out));
}

std::optional<std::string> App::resolve_tier(const std::string& service_tier) const {
  return resolve_service_tier(service_tier, tier_names_, cfg_.tier_aliases);
}

std::string App::openai_tier(const std::string& tier) const { return openai_service_tier(tier, cfg_.tier_aliases); }

sched::TierId App::tier_index(const std::string& name) const {
  const auto it = std::find(tier_names_.begin(), tier_names_.end(), name);
  return it == tier_names_.end() ? sched::TierId(-1) : sched::TierId(it - tier_names_.begin());
}

const std::string& App::tier_name(sched::TierId rank) const {
  static const std::string kNone;
  return rank >= 0 && size_t(rank) < tier_names_.size() ? tier_names_[size_t(rank)] : kNone;
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

namespace {

nlohmann::json model_object(const std::string& id, const ServerConfig& cfg, int64_t max_seq_len, int64_t created) {
  nlohmann::json tiers = nlohmann::json::array();
  for (const auto& t : cfg.sched.tiers) tiers.push_back(t.name);
  return {{"id", id},         {"object", "model"}, {"created", created}, {"owned_by", "tierserve"},
          {"max_model_len", max_seq_len}, {"tierserve", {{"tiers", tiers}, {"max_seq_len", max_seq_len}}}};
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string dump_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

bool App::serves_model(const std::string& name) const {
  return std::find(model_names_.begin(), model_names_.end(), name) != model_names_.end();
}

void App::models(std::shared_ptr<Responder> out) const {
  const int64_t created = unix_now();
  nlohmann::json data = nlohmann::json::array();
  for (const auto& n : model_names_) data.push_back(model_object(n, cfg_, backend_.max_seq_len(), created));
  HttpResponse r;
  r.body = dump_json({{"object", "list"}, {"data", data}});
  out->respond(std::move(r));
}

void App::model(const HttpRequest& req, std::shared_ptr<Responder> out) const {
  const std::string id = req.path.substr(std::string("/v1/models/").size());
  if (!serves_model(id)) {
    out->respond(error_response(model_not_found(id)));
    return;
  }
  HttpResponse r;
  r.body = dump_json(model_object(id, cfg_, backend_.max_seq_len(), unix_now()));
  out->respond(std::move(r));
}

std::vector<tok::ChatMessage> App::with_system_prompt(const std::vector<tok::ChatMessage>& messages) const {
  if (cfg_.model.system_prompt.empty()) return messages;
  for (const auto& m : messages)
    if (m.role == "system") return messages;
  std::vector<tok::ChatMessage> out;
  out.reserve(messages.size() + 1);
  out.push_back({"system", cfg_.model.system_prompt});
  out.insert(out.end(), messages.begin(), messages.end());
  return out;
}

// The body of /tokenize and /detokenize: a JSON object whose optional "model" is one of
// the model's names. Anything else is answered here (400, or 404 model_not_found).
std::optional<nlohmann::json> App::utility_body(const HttpRequest& req, const std::shared_ptr<Responder>& out) const {
  nlohmann::json j = nlohmann::json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    out->respond(error_response(bad_request("the request body must be a JSON object", "", "invalid_json")));
    return std::nullopt;
  }
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) {
      out->respond(error_response(bad_request("'model' must be a string", "model", "invalid_type")));
      return std::nullopt;
    }
    if (!serves_model(j["model"].get<std::string>())) {
      out->respond(error_response(model_not_found(j["model"].get<std::string>())));
      return std::nullopt;
    }
  }
  for (const char* flag : {"add_generation_prompt", "return_token_strs"})
    if (j.contains(flag) && !j[flag].is_boolean()) {
      out->respond(error_response(bad_request(std::string("'") + flag + "' must be a boolean", flag, "invalid_type")));
      return std::nullopt;
    }
  return j;
}

// vLLM's shapes: {"model"?, "prompt": text} or {"model"?, "messages": [...],
// "add_generation_prompt"?} -> {"count", "max_model_len", "tokens", "token_strs"}.
void App::tokenize(const HttpRequest& req, std::shared_ptr<Responder> out) const {
  const std::optional<nlohmann::json> body = utility_body(req, out);
  if (!body) return;
  const nlohmann::json& j = *body;
  std::vector<int32_t> ids;
  if (j.contains("messages")) {
    CompletionRequest cr;
    RequestLimits lim;
    lim.max_messages = cfg_.limits.max_messages;
    if (auto e = parse_completion_request(dump_json({{"messages", j["messages"]}}), Endpoint::kChat, lim, cr)) {
      out->respond(error_response(*e));
      return;
    }
    auto t = backend_.tokenize_chat(with_system_prompt(cr.messages), j.value("add_generation_prompt", true));
    if (!t.is_ok()) {
      out->respond(error_response(bad_request(t.status().message(), "messages", "invalid_value")));
      return;
    }
    ids = std::move(*t);
  } else if (j.contains("prompt") && j["prompt"].is_string()) {
    ids = backend_.tokenize_prompt(j["prompt"].get<std::string>());
  } else {
    out->respond(error_response(bad_request("give 'prompt' (a string) or 'messages'", "prompt", "missing_field")));
    return;
  }
  nlohmann::json strs = nullptr;
  if (j.value("return_token_strs", false)) {
    strs = nlohmann::json::array();
    for (int32_t t : ids) strs.push_back(backend_.detokenize(std::span<const int32_t>(&t, 1)));
  }
  HttpResponse r;
  r.body = dump_json({{"count", ids.size()}, {"max_model_len", backend_.max_seq_len()}, {"tokens", ids}, {"token_strs", strs}});
  out->respond(std::move(r));
}

// {"model"?, "tokens": [ids]} -> {"prompt": text}.
void App::detokenize(const HttpRequest& req, std::shared_ptr<Responder> out) const {
  const std::optional<nlohmann::json> body = utility_body(req, out);
  if (!body) return;
  const nlohmann::json& j = *body;
  if (!j.contains("tokens") || !j["tokens"].is_array()) {
    out->respond(error_response(bad_request("'tokens' must be an array of token ids", "tokens", "invalid_type")));
    return;
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j["tokens"].size(); ++i) {
    const auto& v = j["tokens"][i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= backend_.n_vocab()) {
      out->respond(error_response(bad_request("'tokens[" + std::to_string(i) + "]' is not a token id of this model (0.." +
                                                  std::to_string(backend_.n_vocab() - 1) + ")",
                                              "tokens", "invalid_value")));
      return;
    }
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  HttpResponse r;
  r.body = dump_json({{"prompt", backend_.detokenize(ids)}});
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
  const serving::Stats s = backend_.stats();
  const int64_t waiting = std::max<int64_t>(0, s.n_active - s.n_running);
  const double kv_usage = s.kv.total > 0 ? double(s.kv.used) / double(s.kv.total) : 0.0;
  if (registry_) {
    using metrics::idx;
    using metrics::Metric;
    registry_->gauge(idx(Metric::kNumRequestsWaiting), {})->set(double(waiting));
    registry_->gauge(idx(Metric::kNumRequestsRunning), {})->set(double(s.n_running));
    registry_->gauge(idx(Metric::kKvCacheUsage), {})->set(kv_usage);
    registry_->gauge(idx(Metric::kCacheConfigInfo), {std::to_string(s.kv.block_size), std::to_string(s.kv.total)})->set(1);
    registry_->gauge(idx(Metric::kBuildInfo), {build_version(), build_git_revision(),
                                               kernels::isa_name(kernels::best_isa()), cpu_features().to_string()})
        ->set(1);
  }
  HttpResponse r;
  r.content_type = std::string(metrics::kPrometheusContentType);
  if (registry_) r.body = metrics::format_prometheus(registry_->snapshot());
  r.body += metrics::process_metrics_text(metrics::read_process_stats());
  if (cfg_.metrics.vllm_names) {
    // vLLM's names, which a stock GIE Endpoint Picker and vLLM dashboards read.
    const std::string label = "{model_name=\"" + model_id() + "\"}";
    char b[1024];
    std::snprintf(b, sizeof b,
                  "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
                  "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting%s %lld\n"
                  "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                  "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running%s %lld\n"
                  "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
                  "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc%s %.6g\n"
                  "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
                  "# TYPE vllm:cache_config_info gauge\n"
                  "vllm:cache_config_info{block_size=\"%d\",num_gpu_blocks=\"%d\"} 1\n",
                  label.c_str(), (long long)waiting, label.c_str(), (long long)s.n_running, label.c_str(), kv_usage,
                  s.kv.block_size, s.kv.total);
    r.body += b;
  }
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
    for (const auto& [tier, ns] : s.wait_bound_ns) bounds[tier_name(tier)] = double(ns) / 1e6;
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
