// The routes and handlers of tierserve serve, above the HTTP plumbing and below nothing
// socket-related: App::handle takes an HttpRequest and a Responder.
//
//   main listener:  POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
//                   GET /health/live, GET /health/ready, and GET /metrics and
//                   GET /admin/stats when there is no separate admin listener
//   admin listener: GET /metrics, GET /admin/stats, GET /health/live, GET /health/ready
//
// When keys are configured every route but /health/* needs "Authorization: Bearer KEY".
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

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
  // `backend`, `registry` (may be null) and `clock` outlive the App.
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
  const std::string& model_id() const { return model_id_; }

  // The tier a request names (service_tier, an alias or a tier name), or "" when unknown.
  std::string resolve_tier(const std::string& service_tier) const;

 private:
  void completions(const HttpRequest& req, std::shared_ptr<Responder> out, Endpoint ep) const;
  void models(std::shared_ptr<Responder> out) const;
  void metrics_text(std::shared_ptr<Responder> out) const;
  void stats(std::shared_ptr<Responder> out) const;
  void health(std::shared_ptr<Responder> out, bool ready_check) const;
  int32_t tier_priority(const std::string& name) const;
  void count_rejection(const std::string& tier) const;
  void count_degradation(const std::string& from, const std::string& to, const std::string& reason) const;

  ServerConfig cfg_;
  Backend& backend_;
  metrics::Registry* registry_;
  const Clock& clock_;
  std::string model_id_;
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
