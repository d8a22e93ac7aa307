// The routes and handlers of tierserve serve, above the HTTP plumbing and below nothing
// socket-related: App::handle takes an HttpRequest and a Responder.
//
//   main listener:  POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
//                   GET /v1/models/{id}, POST /tokenize, POST /detokenize, GET /health,
//                   GET /health/live, GET /health/ready, and GET /metrics and
//                   GET /admin/stats when there is no separate admin listener
//   admin listener: GET /metrics, GET /admin/stats, GET /health, GET /health/live,
//                   GET /health/ready
//
// When keys are configured every route but /health* needs "Authorization: Bearer KEY".
// Every request gets a request id (a valid incoming X-Request-Id, else a fresh one),
// echoed as x-request-id; a valid W3C traceparent is logged with it. One access-log line
// per finished request (but /health* and /metrics): docs/server.md, logs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "metrics/registry.h"
#include "server/auth.h"
#include "server/backend.h"
#include "server/config.h"
#include "server/http_types.h"
#include "server/openai_request.h"
#include "server/router.h"

namespace ts::server {

enum class Listener : uint8_t { kMain, kAdmin };

class App {
 public:
  // `backend`, `registry` (may be null) and `clock` outlive the App. `model_id`: the
  // model's name when the config gives no model.served_name.
  App(const ServerConfig& cfg, Backend& backend, metrics::Registry* registry, const Clock& clock, std::string model_id);

  void handle(const HttpRequest& req, std::shared_ptr<Responder> out, Listener l) const;

  // Readiness: /health/ready answers 503 once draining (and new completions 503).
  void set_ready(bool ready) { ready_.store(ready); }
  void begin_drain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }

  // Where /admin/stats reads the HTTP layer's connection counts (HttpServer::
  // connection_stats); without one the stats have no "connections". Set before serving.
  void set_connection_stats(std::function<ConnectionStats()> fn) { connection_stats_ = std::move(fn); }

  const KeyTable& keys() const { return keys_; }
  // The model's names (model.served_name, else the file's): the first is the primary.
  const std::vector<std::string>& model_names() const { return model_names_; }
  const std::string& model_id() const { return model_names_.front(); }

  // The tier a request's service_tier names: a tier name, or OpenAI's values (priority and
  // its newer name fast, default and scale, flex) through tier_aliases. "auto" names none
  // (""): the key's default tier, else the server's, apply as for no service_tier. nullopt
  // when unknown.
  std::optional<std::string> resolve_tier(const std::string& service_tier) const;
  // OpenAI's service_tier value of a tier (what responses say): the first of priority,
  // default, flex, scale, auto that tier_aliases maps to it.
  std::string openai_tier(const std::string& tier) const;
  // A tier's rank (serving's TierId: the configured tiers in priority order) and back; the
  // name of an unknown rank is "".
  sched::TierId tier_index(const std::string& name) const;
  const std::string& tier_name(sched::TierId rank) const;
  bool serves_model(const std::string& name) const;

 private:
  void completions(const HttpRequest& req, std::shared_ptr<Responder> out, Endpoint ep) const;
  void models(std::shared_ptr<Responder> out) const;
  void model(const HttpRequest& req, std::shared_ptr<Responder> out) const;
  // The messages with model.system_prompt in front when they have no system message.
  std::vector<tok::ChatMessage> with_system_prompt(const std::vector<tok::ChatMessage>& messages) const;
  std::optional<nlohmann::json> utility_body(const HttpRequest& req, const std::shared_ptr<Responder>& out) const;
  void tokenize(const HttpRequest& req, std::shared_ptr<Responder> out) const;
  void detokenize(const HttpRequest& req, std::shared_ptr<Responder> out) const;
  void metrics_text(std::shared_ptr<Responder> out) const;
  void stats(std::shared_ptr<Responder> out) const;
  void health(std::shared_ptr<Responder> out, bool ready_check) const;
  void count_rejection(const std::string& tier) const;
  void count_degradation(const std::string& from, const std::string& to, const std::string& reason) const;

  ServerConfig cfg_;
  Backend& backend_;
  metrics::Registry* registry_;
  const Clock& clock_;
  std::vector<std::string> model_names_;
  std::vector<std::string> tier_names_;  // the configured tiers by rank (priority order)
  KeyTable keys_;
  Router main_, admin_;
  std::atomic<bool> ready_{true};
  std::atomic<bool> draining_{false};
  std::function<ConnectionStats()> connection_stats_;
  mutable std::mutex conn_mu_;         // the rejected-connections counter follows the listener's total
  mutable uint64_t conn_rejected_seen_ = 0;
};

// The answer to any request while the model loads: /health/live 200, everything else 503
// ("loading", Retry-After) as an OpenAI error.
HttpResponse loading_response(const HttpRequest& req);

// OpenAI's reset-* duration format: "20ms", "1.5s", "6m0s".
std::string format_reset(int64_t ms);

}  // namespace ts::server
