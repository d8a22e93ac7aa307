// The gateway's configuration: one YAML file (config/gateway.yaml is the default fleet).
// Unknown keys are errors; every error names its key and `tierserve gateway` exits 2.
//
//   listen: {host, port}        admin: {host, port}        (port -1: no admin listener)
//   workers:                    one per model server
//     - name: chat              unique; in logs, metrics and x-tierserve-worker
//       kind: local             local (a `tierserve serve` the gateway starts and
//                               supervises), tierserve, llama.cpp or vllm (by url)
//       model: smollm2          the model name clients ask for (a model may have several
//                               workers; its name must not clash with the router's)
//       path: FILE.gguf         local: the model file ("~/" and "${VAR}" are expanded)
//       threads: 1              local: engine threads (0: an equal share of the cores
//                               among the local workers, at least one)
//       args: [--set, a=b]      local: more `serve` arguments
//       url: http://h:p         remote kinds: the server's base URL
//       upstream_model: NAME    the name the worker itself answers to (default: model)
//       api_key: KEY            remote: sent as its Bearer token
//       pool: shared            the pool the worker is in (dedicated, shared or one's own)
//       max_inflight: 16        requests the gateway sends it at once (0: by kind)
//   tiers: [ {name, pools, borrow, share_min, share_max, max_queue_wait_ms, on_timeout,
//             max_queued_requests} ]   fleet-level tiers (defaults: ultrafast, standard, batch)
//   tier_aliases: {priority: ultrafast, default: standard, flex: batch}
//   default_tier: standard
//   router: {name, rules, classifier, default, tasks, on_saturated, fallback}
//   health: {interval_ms, timeout_ms}
//   upstream: {connect_timeout_ms, head_timeout_ms, idle_timeout_ms}
//   keys, limits, http, log, drain_timeout_ms, on_unentitled: as in `serve`
// docs/gateway.md is the reference with every default.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/config.h"

namespace ts::gateway {

enum class WorkerKind : uint8_t { kLocal, kTierserve, kLlamaCpp, kVllm };
std::string_view worker_kind_name(WorkerKind k);  // "local", "tierserve", "llama.cpp", "vllm"

struct WorkerConfig {
  std::string name;
  WorkerKind kind = WorkerKind::kLocal;
  std::string model;           // what clients ask for
  std::string upstream_model;  // what the worker answers to ("" = model)
  std::string path;            // local: the GGUF
  int32_t threads = 1;         // local; 0: this machine's cores / the local workers
  std::vector<std::string> args;  // local: more `serve` arguments
  std::string url;             // remote: http://host:port
  std::string api_key;         // remote
  std::string pool = "shared";
  int32_t max_inflight = 0;    // 0: 16 for tierserve workers, 4 otherwise
  std::string version;         // of `model`: workers of one model and version serve it together
  double cost_per_hour = 1.0;  // what the worker costs: a request's cost is its share of that

  bool honours_priority() const { return kind != WorkerKind::kLlamaCpp; }
  const std::string& served_as() const { return upstream_model.empty() ? model : upstream_model; }
};

enum class OnTimeout : uint8_t { kPromote, kReject, kDowngrade };

// A tier at the fleet level: which pools it may use, in order, which it may borrow while
// idle, its floor and cap on a shared pool's slots, and what happens at its max wait.
struct TierConfig {
  std::string name;
  std::vector<std::string> pools;   // in order; the first is the tier's own
  std::vector<std::string> borrow;  // used only while idle (no owner's request waits)
  double share_min = 0;             // of a pool's slots while the tier has demand
  double share_max = 1;             // of a pool's slots while others have demand
  int64_t max_queue_wait_ms = 0;    // 0: none
  OnTimeout on_timeout = OnTimeout::kReject;
  std::string downgrade_to;         // with kDowngrade
  int32_t max_queued_requests = 4096;
};
std::vector<TierConfig> default_tiers();

// A routing rule: every condition given must hold; the first rule that holds names the
// target model.
struct RouteRule {
  std::string name;
  int64_t min_prompt_tokens = -1;   // -1: any
  int64_t max_prompt_tokens = -1;
  std::string endpoint;             // "", "chat" or "completion"
  std::vector<std::string> tasks;   // any of (tasks: code, math, translation, or one's own)
  std::vector<std::string> tiers;   // any of
  std::string target;               // a model name
};

struct ClassifierConfig {
  std::string path;                 // a model written by `tierserve route-train`; "" = none
  double threshold = 0.5;           // the best label's probability must reach it
  std::map<std::string, std::string> labels;  // classifier label -> model
};

struct RouterConfig {
  std::string name = "auto";        // the virtual model's name
  std::vector<RouteRule> rules;
  ClassifierConfig classifier;
  std::string default_target;       // when nothing decides ("" = the first model)
  // Task patterns: name -> case-insensitive PCRE2 pattern over the prompt's text. The
  // built-in code, math and translation patterns can be replaced; others added.
  std::map<std::string, std::string> tasks;
  bool fallback_when_saturated = false;  // on_saturated: fallback (else queue)
  std::map<std::string, std::string> fallback;  // model -> the model to fall back to
};
std::map<std::string, std::string> default_task_patterns();

struct HealthConfig {
  int64_t interval_ms = 250;        // between checks of each worker
  int64_t timeout_ms = 500;         // a check that takes longer fails
};

// Per-key limits shared by every gateway replica, in Redis (gateway/shared_limits.h).
// Empty host: each replica keeps its own.
struct RedisConfig {
  std::string host;                 // "": off
  int32_t port = 6379;
  int64_t timeout_ms = 50;          // connect and each command
  bool fail_open = false;           // Redis unreachable: limit locally (open) or refuse with 503 (closed)
  std::string prefix = "tierserve:";
  int64_t lease_ms = 600000;        // a concurrency slot held by a replica that died frees after this
};

// The response cache (gateway/cache.h): answers to deterministic requests (temperature 0
// or a seed). max_bytes 0: off.
struct CacheConfig {
  int64_t max_bytes = 0;
  int64_t ttl_ms = 300000;
  bool shared = false;              // one cache for every API key (default: one per key)
  bool in_redis = false;            // backend: redis (the redis section's server, shared by replicas)
};

// A served model's versions (its workers' `version`s) and how traffic splits between them:
// weights (live: POST /admin/models/{name}/weights), the stable version a rollback returns
// to, and whether a key's or a conversation's requests stay on one version.
enum class Sticky : uint8_t { kNone, kKey, kConversation };
// A canary: the candidate version's share ramps through `steps` (percent) while, over a
// sliding window, it does not do worse than the stable version by more than the thresholds
// (per tier: TTFT and TPOT P99 as ratios, error, timeout and degradation rates as
// differences; cost per 1000 requests as a ratio); past any, it is rolled back at once.
struct CanaryConfig {
  std::string version;                     // "" = no canary
  std::vector<double> steps = {1, 10, 50, 100};
  int64_t window_ms = 60000;               // the comparison's sliding window; also a step's least duration
  int64_t interval_ms = 5000;              // between two decisions
  int64_t min_requests = 50;               // per version and tier in the window before a tier counts
  double ttft_p99_ratio = 1.2, tpot_p99_ratio = 1.2, cost_ratio = 1.2;
  double error_rate_delta = 0.01, timeout_rate_delta = 0.01, degradation_rate_delta = 0.05;
};
// Shadow traffic: a fraction of the model's requests mirrored to a candidate version,
// below every paying tier; the client gets the first answer only; both answers go to the
// pair database (shadow.db) for the blind review.
struct ShadowConfig {
  std::string version;                    // "" = none
  double fraction = 0.1;                  // of the model's requests, in [0, 1]
};
struct ModelRelease {
  std::map<std::string, double> weights;  // version -> weight (>= 0, sum > 0)
  std::string stable;                     // "" = none (a rollback is refused)
  Sticky sticky = Sticky::kNone;
  CanaryConfig canary;
  ShadowConfig shadow;
};
struct ShadowDbConfig {
  std::string db;                         // the SQLite file ("" = no shadow traffic)
  int64_t max_rows = 100000;              // the oldest pairs go beyond it
  int64_t max_wait_ms = 2000;             // a shadow waiting longer for a slot is dropped
  int32_t max_queued = 64;                // shadows waiting at once; more are dropped
  double share_max = 0.1;                 // of a pool's slots while paying tiers have demand
};

struct UpstreamConfig {
  int64_t connect_timeout_ms = 1000;
  int64_t head_timeout_ms = 600000; // until the response's status line (a whole completion)
  int64_t idle_timeout_ms = 120000; // between two reads of a response body
};

struct GatewayConfig {
  server::ListenConfig listen;
  server::ListenConfig admin{"127.0.0.1", -1};
  std::vector<WorkerConfig> workers;
  std::vector<TierConfig> tiers = default_tiers();
  std::map<std::string, std::string> tier_aliases = {{"priority", "ultrafast"}, {"default", "standard"}, {"flex", "batch"}};
  std::string default_tier = "standard";
  server::RequestPriorities request_priorities = server::default_request_priorities();  // as serve's
  RouterConfig router;
  // model name -> its versions' split. A model whose workers all have one version needs
  // none (that version takes everything and is stable).
  std::map<std::string, ModelRelease> releases;
  ShadowDbConfig shadow;
  HealthConfig health;
  UpstreamConfig upstream;
  RedisConfig redis;
  CacheConfig cache;
  server::Limits limits;
  server::HttpConfig http;
  server::LogConfig log;
  int64_t drain_timeout_ms = 30000;
  server::OnUnentitled on_unentitled = server::OnUnentitled::kDowngrade;
  std::vector<server::KeyConfig> keys;
  std::string serve_binary;         // local workers' binary ("" = this executable)

  // Model names clients may ask for, in order of first appearance (the router's last).
  std::vector<std::string> models() const;
  int tier_index(const std::string& name) const;  // -1 when unknown
};

// Parses YAML text (`origin` names the file in messages); kInvalidArgument with the key.
Result<GatewayConfig> parse_gateway_config(std::string_view yaml_text, std::string_view origin = "gateway config");
Result<GatewayConfig> load_gateway_config(const std::string& path);
// Cross-field checks: unique worker names, known pools and kinds, URLs that are http://,
// local workers with a model file, every rule's target a model, rules that can match, tiers
// and aliases that name configured tiers, keys.
Status validate(const GatewayConfig& c);
// A split's weights against the model's versions: "" when valid, else what is wrong
// (unknown version, negative or not finite, summing to 0). Used for the config and for
// POST /admin/models/{name}/weights.
std::string check_weights(const std::map<std::string, double>& weights, const std::set<std::string>& versions);

// "http://host:port[/]" -> host and port; kInvalidArgument otherwise (https included: the
// gateway speaks plain HTTP to its workers).
struct HostPort {
  std::string host, port;
};
Result<HostPort> parse_http_url(const std::string& url);

}  // namespace ts::gateway
