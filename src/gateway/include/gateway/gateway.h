// `tierserve gateway`: one OpenAI-compatible endpoint in front of the fleet's workers.
//
// A completion request is parsed just enough to route it (model, stream, service_tier,
// the prompt's text, max_tokens; the worker validates the rest), authenticated and charged
// against its key's limits (once, here), given a tier (as `serve` resolves service_tier),
// a model (by name, or by the router for its virtual model), and a ticket in the Fleet,
// which places it on a worker. The body goes to that worker with the model name it answers
// to and the tier in the form it understands (tierserve: service_tier; vLLM: priority, lower
// first; llama.cpp: none, the gateway's own tier order is all there is). The response comes
// back as it arrives: streams unbuffered.
//
// Said to the caller: x-tierserve-model-served, x-tierserve-route (router requests),
// x-tierserve-worker, x-tierserve-pool (and x-tierserve-pool-reason: fallback or borrowed),
// x-tierserve-tier-requested / -served and x-tierserve-degraded-reason (not_entitled,
// queue_timeout, model_fallback), x-request-id.
//
// Nothing lost: a request whose worker fails before any byte reached the client is placed
// once more on another worker; a stream cut part-way ends with an error event and [DONE];
// a non-streamed one gets 502 worker_error. A stream that waits here longer than
// http.queued_notice_ms gets its headers and ": queued" comments (a later refusal is then
// said in-stream).
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "gateway/cache.h"
#include "gateway/config.h"
#include "gateway/fleet.h"
#include "gateway/release.h"
#include "gateway/route.h"
#include "gateway/shared_limits.h"
#include "gateway/workers.h"
#include "metrics/registry.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/http_server.h"
#include "server/router.h"

namespace ts::tok {
class Tokenizer;
}

namespace ts::gateway {

std::vector<metrics::MetricDef> gateway_metric_defs();

class Gateway {
 public:
  // Builds the fleet and the router (loading the classifier), and a tokenizer for the
  // prompt-token rules from the first local worker's model file (else the byte estimate).
  static Result<std::unique_ptr<Gateway>> create(const GatewayConfig& cfg, std::string serve_binary, std::string work_dir,
                                                 const Clock& clock);
  ~Gateway();

  // Listens (port 0: any; the bound ports are returned), starts the workers and the threads.
  Status start();
  int port() const { return port_; }
  int admin_port() const { return admin_port_; }
  // SIGTERM: not ready, new requests 503 draining, in-flight and queued ones finish for up
  // to drain_timeout_ms; then the workers are stopped.
  void drain_and_stop();

  // The handler of one request (exposed for tests).
  void dispatch(const server::HttpRequest& req, std::shared_ptr<server::Responder> out);

  int64_t prompt_tokens(std::string_view text, bool* estimated) const;
  const Fleet& fleet() const { return *fleet_; }

  struct Exchange;  // one proxied request (gateway.cc)

 private:
  Gateway(const GatewayConfig& cfg, const Clock& clock);
  void completions(const server::HttpRequest& req, std::shared_ptr<server::Responder> out, bool chat);
  void models(std::shared_ptr<server::Responder> out) const;
  void release_admin(const server::HttpRequest& req, std::shared_ptr<server::Responder> out);
  void launch_shadow(const std::shared_ptr<Exchange>& x, int unit, bool chat);
  void finish_pair(const std::shared_ptr<struct ShadowPair>& pair);
  void model(const server::HttpRequest& req, std::shared_ptr<server::Responder> out) const;
  void metrics_text(std::shared_ptr<server::Responder> out) const;
  void stats(std::shared_ptr<server::Responder> out) const;
  void health(std::shared_ptr<server::Responder> out, bool ready) const;
  void start_attempt(const std::shared_ptr<Exchange>& x, const Placement& p);
  void submit(const std::shared_ptr<Exchange>& x, bool retry, int exclude_worker);
  void end_attempt(const std::shared_ptr<Exchange>& x);
  void fill_record(Exchange& x) const;
  void refuse(const std::shared_ptr<Exchange>& x, const server::ApiError& e);
  std::string cache_key(const nlohmann::json& body, bool chat, const std::string& model, const server::KeyState* key) const;
  void answer_from_cache(const std::shared_ptr<Exchange>& x, const CachedAnswer& a);
  void store_in_cache(Exchange& x, const nlohmann::json* body);
  static void note_for_cache(Exchange& x, const nlohmann::json& j);
  void respond_to(const std::shared_ptr<Exchange>& x, server::HttpResponse r);
  void end_to(const std::shared_ptr<Exchange>& x);
  void abort_calls_on(int worker);
  void ticker();
  std::optional<std::string> resolve_tier(const std::string& asked) const;

 public:  // for Exchange (gateway.cc)
  const GatewayConfig cfg_;
  const Clock& clock_;
  std::unique_ptr<metrics::Registry> registry_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<tok::Tokenizer> tokenizer_;
  std::vector<std::string> models_;  // served model names (not the router's)
  std::vector<std::string> tier_names_;  // the configured tiers, in order
  std::unique_ptr<Releases> releases_;  // their versions and the live split
  std::unique_ptr<class PairWriter> pair_writer_;  // shadow traffic configured
  int shadow_tier_ = -1;                 // the fleet's tier for shadows (after the paying ones)
  server::KeyTable keys_;
  std::unique_ptr<SharedLimits> shared_limits_;  // redis configured
  std::unique_ptr<CacheStore> cache_;            // cache configured
  mutable std::mutex cache_metrics_mu_;
  mutable CacheStore::Stats cache_seen_;         // GUARDED_BY(cache_metrics_mu_): what /metrics counted

  std::string replica_id_;                       // random, for lease ids
  std::atomic<uint64_t> lease_seq_{0};
  boost::asio::io_context io_;  // upstream calls and health checks
  std::unique_ptr<WorkerSet> workers_;

 private:
  std::unique_ptr<server::HttpServer> http_;
  server::Router routes_, admin_routes_;
  int port_ = -1, admin_port_ = -1;
  std::vector<std::thread> io_threads_;
  std::unique_ptr<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread ticker_;
  std::atomic<bool> stop_{false}, draining_{false};
  mutable std::mutex live_mu_;
  std::set<std::shared_ptr<Exchange>> live_;  // GUARDED_BY(live_mu_): accepted, not ended
  std::string serve_binary_, work_dir_;
};

}  // namespace ts::gateway
