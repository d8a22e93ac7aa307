#include "gateway/gateway.h"

#include "gateway/pair_store.h"

#include <boost/asio/executor_work_guard.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "gguf/gguf.h"
#include "metrics/process.h"
#include "metrics/prometheus.h"
#include "server/access_log.h"
#include "server/api_error.h"
#include "server/openai_response.h"
#include "server/sha256.h"
#include "tokenizer/tokenizer.h"

namespace ts::gateway {

using nlohmann::json;
using server::ApiError;
using server::HttpRequest;
using server::HttpResponse;
using server::Responder;

// ---------------------------------------------------------------------------------------
// Metrics

namespace {

enum M : size_t {
  kRequests,
  kRouteDecisions,
  kDegradations,
  kPlacements,
  kRetries,
  kWorkerErrors,
  kWorkerUp,
  kWorkerInflight,
  kWorkerRestarts,
  kQueueDepth,
  kQueueDepthTotal,
  kQueueSeconds,
  kTtftSeconds,
  kSharedLimits,
  kSharedLimitErrors,
  kCacheRequests,
  kCacheEvictions,
  kCacheBytes,
  kCacheEntries,
  kCanaryDecisions,
  kShadow,
  kCacheErrors,
  kCount
};

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

}  // namespace

std::vector<metrics::MetricDef> gateway_metric_defs() {
  using T = metrics::MetricType;
  std::vector<metrics::MetricDef> d(kCount);
  d[kRequests] = {"tierserve_gateway_requests_total", "Requests that ended, by tier requested, model served and outcome.",
                  T::kCounter, {"tier", "model", "version", "outcome"}, {}};
  d[kRouteDecisions] = {"tierserve_route_decisions_total", "Requests to the router's model, by the model it chose and why.",
                        T::kCounter, {"router", "target", "reason"}, {}};
  d[kDegradations] = {"tierserve_gateway_degradations_total", "Requests served other than asked, by reason.", T::kCounter,
                      {"tier_requested", "tier_served", "reason"}, {}};
  d[kPlacements] = {"tierserve_gateway_placements_total", "Requests placed on a worker, by tier, pool and how (own, fallback, borrowed).",
                    T::kCounter, {"tier", "pool", "how"}, {}};
  d[kRetries] = {"tierserve_gateway_retries_total", "Requests placed again after their worker failed before any byte.",
                 T::kCounter, {"worker"}, {}};
  d[kWorkerErrors] = {"tierserve_gateway_worker_errors_total", "Calls to a worker that failed, by kind.", T::kCounter,
                      {"worker", "kind"}, {}};
  d[kWorkerUp] = {"tierserve_gateway_worker_up", "1 while the worker passes its health checks.", T::kGauge, {"worker"}, {}};
  d[kWorkerInflight] = {"tierserve_gateway_worker_inflight", "Requests the gateway has on the worker.", T::kGauge, {"worker"}, {}};
  d[kWorkerRestarts] = {"tierserve_gateway_worker_restarts_total", "Local worker processes restarted after they exited.",
                        T::kCounter, {"worker"}, {}};
  d[kQueueDepth] = {"tierserve_gateway_queue_depth", "Requests waiting in the gateway for a worker, by tier.", T::kGauge,
                    {"tier"}, {}};
  d[kQueueDepthTotal] = {"tierserve_gateway_num_requests_waiting", "Requests waiting in the gateway for a worker.", T::kGauge,
                         {}, {}};
  d[kQueueSeconds] = {"tierserve_gateway_queue_seconds", "Time from arrival to placement on a worker.", T::kHistogram,
                      {"tier"}, latency_buckets()};
  d[kTtftSeconds] = {"tierserve_gateway_first_byte_seconds", "Time from arrival to the worker's first body byte.",
                     T::kHistogram, {"tier"}, latency_buckets()};
  d[kSharedLimits] = {"tierserve_gateway_shared_limits_total",
                      "Per-key admissions checked in Redis: admitted, limited, and with Redis unavailable refused (fail closed) or limited locally (fail open).",
                      T::kCounter, {"outcome"}, {}};
  d[kSharedLimitErrors] = {"tierserve_gateway_shared_limits_errors_total", "Calls to Redis for the shared limits that failed, by kind.",
                           T::kCounter, {"kind"}, {}};
  d[kCacheRequests] = {"tierserve_gateway_cache_requests_total", "Cacheable requests, by result (hit, miss).", T::kCounter,
                       {"result"}, {}};
  d[kCacheEvictions] = {"tierserve_gateway_cache_evictions_total", "Cache entries dropped for room (expired ones not counted).",
                        T::kCounter, {}, {}};
  d[kCacheBytes] = {"tierserve_gateway_cache_bytes", "Bytes the response cache holds.", T::kGauge, {}, {}};
  d[kShadow] = {"tierserve_gateway_shadow_total",
                "Shadow requests, by model and outcome: recorded (both answers stored), dropped (no slot in time, or "
                "the pair queue full), error (the shadow failed; stored), db_error (the pair database failed).",
                T::kCounter, {"model", "outcome"}, {}};
  d[kCanaryDecisions] = {"tierserve_gateway_canary_decisions_total",
                        "A canary's decisions, by model: advance (a step up), promote (the canary is stable), hold, rollback.",
                        T::kCounter, {"model", "decision"}, {}};
  d[kCacheEntries] = {"tierserve_gateway_cache_entries", "Answers the response cache holds.", T::kGauge, {}, {}};
  d[kCacheErrors] = {"tierserve_gateway_cache_errors_total",
                     "Cache lookups or stores that failed (redis: the call; corrupt_entry: an entry that did not parse, dropped).",
                     T::kCounter, {"kind"}, {}};
  return d;
}

// ---------------------------------------------------------------------------------------
// One proxied request.

// A shadow pair: the client's answer and the shadow version's, written once both are in.
struct ShadowPair {
  std::mutex mu;
  PairRow row;
  int sides = 0;
};

struct Gateway::Exchange {
  Gateway* g = nullptr;
  std::shared_ptr<Responder> out;
  server::AccessRecord* rec = nullptr;
  server::KeyState* key = nullptr;         // charged locally (this replica's buckets)
  server::KeyState* shared_key = nullptr;  // charged in Redis (every replica's), under lease_id
  std::string lease_id;
  bool limits_local = false;               // Redis was unavailable: limited here only (fail open)
  std::mutex mu;

  // The request.
  json body;
  bool stream = false, chat = true;
  std::string path;  // upstream path
  std::string request_id, traceparent;
  int tier_requested = 0, tier = 0;
  int model = 0, fallback_model = -1;  // served model names' indices
  int unit = 0, fallback_unit = -1;    // their versions' (the fleet's models: Releases::units)
  std::string version;                 // of the unit that serves it ("" unversioned)
  int64_t placed_ns = 0;               // the last attempt's start on a worker
  std::shared_ptr<ShadowPair> pair;    // mirrored to a shadow version: this side's answer goes in it
  std::string answer_text;             // with a pair: the answer the client got
  bool timed_out = false;              // the worker did not answer within a timeout
  std::string route;        // x-tierserve-route ("" unless the router chose)
  std::string degraded_reason;
  int64_t charged_tokens = 0, max_tokens = 0, prompt_tokens = 0;
  int64_t arrived_ns = 0;

  // Its state.
  uint64_t ticket = 0;
  bool queued = false;      // a ticket waits in the fleet
  bool placed = false;      // an attempt is under way
  Placement pl;
  std::shared_ptr<UpstreamCall> call;
  int attempts = 0;
  bool aborted = false;     // the gateway ended the call (worker unreachable)
  bool client_gone = false;
  bool client_started = false;  // stream headers sent
  bool ended = false;
  int64_t body_bytes = 0;   // of the worker's response, forwarded
  int status = 0;
  server::Headers up_headers;
  std::string buffered;     // non-stream or error bodies
  int64_t last_notice_ns = 0;
  int64_t first_byte_ns = 0;
  int64_t completion_tokens = -1, content_chunks = 0;
  std::string sse_tail;     // an incomplete SSE event (peeked for usage; rewritten when needed)
  bool rewrite_model = false;
  // The response cache: the entry's key ("" not cacheable), and the answer as it streams.
  std::string cache_key;
  bool include_usage = false;
  bool cache_spoiled = false;  // an error event, a fallback model: not stored
  std::string cached_text, cached_finish;
  int64_t usage_prompt = -1;
};

namespace {

// A conversation's identity when the client names none (x-tierserve-conversation): its
// opening — the system prompt and the first user message of a chat, a completion's
// prompt — which every later turn of the same conversation repeats.
// The text of a whole completion body ("" when it has none).
std::string answer_text(const json& j, bool chat) {
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return "";
  const json& c = j["choices"][0];
  const json* t = chat && c.contains("message") && c["message"].is_object() && c["message"].contains("content")
                      ? &c["message"]["content"]
                      : !chat && c.contains("text") ? &c["text"] : nullptr;
  return t && t->is_string() ? t->get<std::string>() : "";
}

std::string conversation_of(const json& b, bool chat) {
  if (!chat) return b.contains("prompt") ? b["prompt"].dump() : "";
  std::string id;
  if (!b.contains("messages") || !b["messages"].is_array()) return id;
  for (const json& m : b["messages"]) {
    if (!m.is_object()) continue;
    const std::string role = m.value("role", std::string());
    if (role == "system" || role == "user") id += role + ":" + (m.contains("content") ? m["content"].dump() : "") + "\n";
    if (role == "user") break;
  }
  return id;
}

bool hop_by_hop(const std::string& n) {
  return n == "connection" || n == "keep-alive" || n == "transfer-encoding" || n == "content-length" || n == "date" ||
         n == "server" || n == "content-type" || n == "x-request-id" || n == "x-tierserve-tier-requested" ||
         n == "x-accel-buffering" || n == "cache-control";
}

std::string header_of(const server::Headers& h, const std::string& name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "";
}

// The text the router looks at: the messages' contents, or the prompt.
std::string prompt_text(const json& body, bool chat) {
  std::string t;
  if (chat) {
    const auto it = body.find("messages");
    if (it == body.end() || !it->is_array()) return t;
    for (const auto& m : *it) {
      if (!m.is_object()) continue;
      const auto c = m.find("content");
      if (c == m.end()) continue;
      if (c->is_string()) {
        t += c->get<std::string>();
        t += '\n';
      } else if (c->is_array()) {
        for (const auto& part : *c)
          if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string()) {
            t += part["text"].get<std::string>();
            t += '\n';
          }
      }
    }
    return t;
  }
  const auto p = body.find("prompt");
  if (p == body.end()) return t;
  if (p->is_string()) return p->get<std::string>();
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) return (*p)[0].get<std::string>();
  return t;
}

ApiError refusal_error(Refusal r, const std::string& message) {
  ApiError e = server::server_error(refusal_status(r), message, std::string(refusal_code(r)));
  if (e.status == 429 || e.status == 503) e.retry_after_ms = 1000;
  return e;
}

}  // namespace

// ---------------------------------------------------------------------------------------

Gateway::Gateway(const GatewayConfig& cfg, const Clock& clock) : cfg_(cfg), clock_(clock), keys_(cfg.keys, clock) {}

Gateway::~Gateway() {
  stop_ = true;
  if (ticker_.joinable()) ticker_.join();
  if (workers_) workers_->stop(0);
  if (http_) http_->stop();
  work_.reset();
  io_.stop();
  for (auto& t : io_threads_)
    if (t.joinable()) t.join();
}

Result<std::unique_ptr<Gateway>> Gateway::create(const GatewayConfig& cfg, std::string serve_binary, std::string work_dir,
                                                 const Clock& clock) {
  if (Status st = validate(cfg); !st.is_ok()) return st;
  std::unique_ptr<Gateway> g(new Gateway(cfg, clock));
  g->serve_binary_ = std::move(serve_binary);
  g->work_dir_ = std::move(work_dir);
  auto reg = metrics::Registry::create(gateway_metric_defs());
  if (!reg.is_ok()) return reg.status();
  g->registry_ = std::move(reg).value();
  if (!cfg.redis.host.empty()) g->shared_limits_ = std::make_unique<SharedLimits>(cfg.redis);
  if (cfg.cache.max_bytes > 0) {
    if (cfg.cache.in_redis) g->cache_ = std::make_unique<RedisCache>(cfg.redis, cfg.cache.ttl_ms, std::max<int64_t>(1024, cfg.cache.max_bytes / 64));
    else g->cache_ = std::make_unique<ResponseCache>(cfg.cache.max_bytes, cfg.cache.ttl_ms, clock);
  }
  {
    std::random_device rd;
    char id[17];
    std::snprintf(id, sizeof id, "%08x%08x", rd(), rd());
    g->replica_id_ = id;
  }
  g->models_ = cfg.models();
  g->releases_ = std::make_unique<Releases>(cfg, g->models_, clock);
  // Pools: those the tiers name, then any other a worker is in.
  std::vector<std::string> pools;
  auto pool_id = [&](const std::string& p) {
    auto it = std::find(pools.begin(), pools.end(), p);
    if (it != pools.end()) return int(it - pools.begin());
    pools.push_back(p);
    return int(pools.size() - 1);
  };
  std::vector<FleetTier> tiers;
  for (const TierConfig& t : cfg.tiers) {
    FleetTier ft;
    ft.name = t.name;
    for (const auto& p : t.pools) ft.pools.push_back(pool_id(p));
    for (const auto& p : t.borrow) ft.borrow.push_back(pool_id(p));
    ft.share_min = t.share_min;
    ft.share_max = t.share_max;
    ft.max_wait_ns = t.max_queue_wait_ms * 1000000;
    ft.on_timeout = t.on_timeout;
    ft.downgrade_to = t.on_timeout == OnTimeout::kDowngrade ? cfg.tier_index(t.downgrade_to) : -1;
    ft.max_queued = t.max_queued_requests;
    tiers.push_back(std::move(ft));
  }
  // Shadow traffic: a tier of its own below every paying one, on every pool.
  if (!cfg.shadow.db.empty()) {
    FleetTier st;
    st.name = "shadow";
    for (size_t i = 0; i < pools.size(); ++i) st.pools.push_back(int(i));
    for (const WorkerConfig& w : cfg.workers)
      if (int id = pool_id(w.pool); std::find(st.pools.begin(), st.pools.end(), id) == st.pools.end()) st.pools.push_back(id);
    st.share_max = cfg.shadow.share_max;
    st.hard_cap = true;  // the slots it leaves stay free for paying requests
    st.max_wait_ns = cfg.shadow.max_wait_ms * 1000000;
    st.on_timeout = OnTimeout::kReject;
    st.max_queued = cfg.shadow.max_queued;
    g->shadow_tier_ = int(tiers.size());
    tiers.push_back(std::move(st));
    Gateway* raw = g.get();
    g->pair_writer_ = std::make_unique<PairWriter>(
        cfg.shadow.db, cfg.shadow.max_rows,
        [raw](const std::string& kind, const std::string& msg) {
          raw->registry_->counter(kShadow, {"", "db_error"})->inc();
          log_record(LogLevel::kWarn, "shadow pairs: " + kind, {{"error", msg}});
        },
        [raw](const PairRow& r) { raw->registry_->counter(kShadow, {r.model, "recorded"})->inc(); });
  }
  std::vector<FleetWorker> workers;
  for (const WorkerConfig& w : cfg.workers) {
    FleetWorker fw;
    fw.name = w.name;
    fw.pool = pool_id(w.pool);
    fw.model = g->releases_->unit_of_worker(int(workers.size()));  // the fleet queues per model version
    fw.honours_priority = w.honours_priority();
    fw.max_inflight = w.max_inflight;
    workers.push_back(std::move(fw));
  }
  g->fleet_ = std::make_unique<Fleet>(pools, std::move(tiers), std::move(workers), int(g->releases_->units().size()), clock);
  auto router = Router::create(cfg.router, g->models_.front());
  if (!router.is_ok()) return router.status();
  g->router_ = std::move(router).value();
  // A tokenizer for the prompt-token rules: the first local worker's model's vocabulary.
  for (const WorkerConfig& w : cfg.workers) {
    if (w.kind != WorkerKind::kLocal) continue;
    auto f = gguf::File::open(w.path);
    if (!f.is_ok()) return invalid_argument("worker " + w.name + ": " + f.status().message());
    auto t = tok::Tokenizer::from_gguf(**f);
    if (t.is_ok()) g->tokenizer_ = std::move(t).value();
    break;
  }
  g->workers_ = std::make_unique<WorkerSet>(g->cfg_, g->io_, *g->fleet_, g->serve_binary_, g->work_dir_);
  Gateway* raw = g.get();
  g->workers_->on_unreachable = [raw](int w) { raw->abort_calls_on(w); };
  g->workers_->on_health = [raw](int w, bool up) {
    raw->registry_->gauge(kWorkerUp, {raw->cfg_.workers[size_t(w)].name})->set(up ? 1 : 0);
  };
  g->workers_->on_restart = [raw](int w) { raw->registry_->counter(kWorkerRestarts, {raw->cfg_.workers[size_t(w)].name})->inc(); };
  // Every worker's series from the start (a counter that appears only at its first
  // increment hides that first event from rate() and increase()).
  for (const WorkerConfig& w : cfg.workers) {
    g->registry_->gauge(kWorkerUp, {w.name})->set(0);
    g->registry_->counter(kRetries, {w.name});
    if (w.kind == WorkerKind::kLocal) g->registry_->counter(kWorkerRestarts, {w.name});
  }
  // Routes.
  using H = std::shared_ptr<Responder>;
  auto& r = g->routes_;
  r.add("POST", "/v1/chat/completions", [raw](const HttpRequest& q, H o) { raw->completions(q, std::move(o), true); });
  r.add("POST", "/v1/completions", [raw](const HttpRequest& q, H o) { raw->completions(q, std::move(o), false); });
  r.add("GET", "/v1/models", [raw](const HttpRequest&, H o) { raw->models(std::move(o)); });
  r.add_prefix("GET", "/v1/models/", [raw](const HttpRequest& q, H o) { raw->model(q, std::move(o)); });
  for (auto* rt : {&g->routes_, &g->admin_routes_}) {
    rt->add("GET", "/health", [raw](const HttpRequest&, H o) { raw->health(std::move(o), true); });
    rt->add("GET", "/health/live", [raw](const HttpRequest&, H o) { raw->health(std::move(o), false); });
    rt->add("GET", "/health/ready", [raw](const HttpRequest&, H o) { raw->health(std::move(o), true); });
  }
  auto& admin = cfg.admin.port >= 0 ? g->admin_routes_ : g->routes_;
  admin.add("GET", "/metrics", [raw](const HttpRequest&, H o) { raw->metrics_text(std::move(o)); });
  admin.add("GET", "/admin/stats", [raw](const HttpRequest&, H o) { raw->stats(std::move(o)); });
  admin.add_prefix("GET", "/admin/models/", [raw](const HttpRequest& q, H o) { raw->release_admin(q, std::move(o)); });
  admin.add_prefix("POST", "/admin/models/", [raw](const HttpRequest& q, H o) { raw->release_admin(q, std::move(o)); });
  return g;
}

Status Gateway::start() {
  server::HttpServerOptions o;
  o.max_header_bytes = cfg_.limits.max_header_bytes;
  o.max_body_bytes = cfg_.limits.max_body_bytes;
  o.idle_timeout_ms = cfg_.http.idle_timeout_ms;
  o.read_timeout_ms = cfg_.http.read_timeout_ms;
  o.write_timeout_ms = cfg_.http.write_timeout_ms;
  o.max_connections = cfg_.http.max_connections;
  http_ = std::make_unique<server::HttpServer>(o);
  auto p = http_->listen(cfg_.listen.host, cfg_.listen.port, [this](const HttpRequest& q, std::shared_ptr<Responder> out) {
    dispatch(q, std::move(out));
  });
  if (!p.is_ok()) return p.status();
  port_ = *p;
  if (cfg_.admin.port >= 0) {
    auto a = http_->listen(
        cfg_.admin.host, cfg_.admin.port,
        [this](const HttpRequest& q, std::shared_ptr<Responder> out) {
          server::OpenedExchange x = server::open_exchange(q, std::move(out), keys_, clock_, false);
          if (x.out) admin_routes_.dispatch(q, std::move(x.out));
        },
        false);
    if (!a.is_ok()) return a.status();
    admin_port_ = *a;
  }
  work_ = std::make_unique<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(io_.get_executor());
  for (int i = 0; i < 2; ++i) io_threads_.emplace_back([this] { io_.run(); });
  if (Status st = workers_->start(); !st.is_ok()) return st;
  ticker_ = std::thread([this] { ticker(); });
  http_->start(cfg_.http.threads);
  return Status::ok();
}

void Gateway::ticker() {
  int64_t last_notice_scan = 0;
  while (!stop_.load()) {
    fleet_->tick();
    for (const Releases::Decision& d : releases_->tick()) {
      registry_->counter(kCanaryDecisions, {d.model, d.decision})->inc();
      if (d.decision != "hold") {
        std::string why;
        for (const auto& r : d.reasons) why += (why.empty() ? "" : "; ") + r;
        log_record(d.decision == "rollback" ? LogLevel::kWarn : LogLevel::kInfo, "canary " + d.decision,
                   {{"model", d.model}, {"reasons", why}});
      }
    }
    const int64_t now = clock_.now_ns();
    if (cfg_.http.queued_notice_ms > 0 && now - last_notice_scan > 100'000'000) {
      last_notice_scan = now;
      std::vector<std::shared_ptr<Exchange>> xs;
      {
        std::lock_guard<std::mutex> lk(live_mu_);
        xs.assign(live_.begin(), live_.end());
      }
      const int64_t every = cfg_.http.queued_notice_ms * 1000000;
      for (auto& x : xs) {
        std::lock_guard<std::mutex> lk(x->mu);
        if (!x->stream || !x->queued || x->ended || now - std::max(x->arrived_ns, x->last_notice_ns) < every) continue;
        if (!x->client_started) {
          HttpResponse h;
          h.content_type = "text/event-stream";
          h.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"},
                       {"x-tierserve-tier-requested", cfg_.tiers[size_t(x->tier_requested)].name}};
          x->out->start_stream(std::move(h));
          x->client_started = true;
        }
        x->out->send(server::sse_comment("queued"));
        x->last_notice_ns = now;
      }
    }
    const auto q = fleet_->queued_per_tier();
    int64_t total = 0;
    for (size_t t = 0; t < q.size(); ++t) {
      registry_->gauge(kQueueDepth, {t < cfg_.tiers.size() ? cfg_.tiers[t].name : "shadow"})->set(double(q[t]));
      if (t < cfg_.tiers.size()) total += q[t];  // shadows are not paying requests waiting
    }
    registry_->gauge(kQueueDepthTotal)->set(double(total));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Gateway::drain_and_stop() {
  draining_ = true;
  if (http_) http_->stop_accepting();
  const int64_t deadline = clock_.now_ns() + cfg_.drain_timeout_ms * 1000000;
  for (;;) {
    size_t n;
    {
      std::lock_guard<std::mutex> lk(live_mu_);
      n = live_.size();
    }
    if (n == 0 || clock_.now_ns() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // What is left ends explicitly.
  std::vector<std::shared_ptr<Exchange>> xs;
  {
    std::lock_guard<std::mutex> lk(live_mu_);
    xs.assign(live_.begin(), live_.end());
  }
  for (auto& x : xs) {
    std::shared_ptr<UpstreamCall> c;
    {
      std::lock_guard<std::mutex> lk(x->mu);
      x->aborted = true;
      x->attempts = 99;  // no retry now
      c = x->call;
      if (x->queued && fleet_->cancel(x->ticket)) x->queued = false;
    }
    if (c) c->cancel();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  workers_->stop(cfg_.drain_timeout_ms);
  if (http_) {
    for (int i = 0; i < 100 && http_->in_flight() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http_->stop();
  }
}

void Gateway::dispatch(const HttpRequest& req, std::shared_ptr<Responder> raw) {
  server::OpenedExchange x = server::open_exchange(req, std::move(raw), keys_, clock_, cfg_.log.access);
  if (!x.out) return;
  if (draining_.load() && req.path.rfind("/health", 0) != 0) {
    x.out->respond(server::error_response(server::server_error(503, "the gateway is shutting down", "draining")));
    return;
  }
  routes_.dispatch(req, std::move(x.out));
}

int64_t Gateway::prompt_tokens(std::string_view text, bool* estimated) const {
  if (tokenizer_) {
    *estimated = false;
    return int64_t(tokenizer_->encode(text, false, false).size());
  }
  *estimated = true;
  return int64_t((text.size() + 3) / 4);  // about four bytes a token in English text
}

std::optional<std::string> Gateway::resolve_tier(const std::string& asked) const {
  std::vector<std::string> names;
  for (const auto& t : cfg_.tiers) names.push_back(t.name);
  return server::resolve_service_tier(asked, names, cfg_.tier_aliases);
}

int Gateway::tier_priority(const std::string& tier) const { return cfg_.tier_index(tier); }

void Gateway::completions(const HttpRequest& req, std::shared_ptr<Responder> out, bool chat) {
  auto x = std::make_shared<Exchange>();
  x->g = this;
  x->out = out;
  x->rec = out->access_record();
  x->chat = chat;
  x->path = chat ? "/v1/chat/completions" : "/v1/completions";
  x->arrived_ns = clock_.now_ns();
  x->request_id = x->rec ? x->rec->request_id : "";
  x->traceparent = std::string(req.header("traceparent"));
  x->body = json::parse(req.body, nullptr, false);
  auto bad = [&](const std::string& msg, const std::string& param, const std::string& code) {
    out->respond(server::error_response(server::bad_request(msg, param, code)));
  };
  if (x->body.is_discarded() || !x->body.is_object()) return bad("the request body must be a JSON object", "", "invalid_json");
  const json& b = x->body;
  for (const char* f : {"model", "service_tier"})
    if (b.contains(f) && !b[f].is_null() && !b[f].is_string()) return bad(std::string("'") + f + "' must be a string", f, "invalid_type");
  if (b.contains("stream") && !b["stream"].is_null() && !b["stream"].is_boolean()) return bad("'stream' must be a boolean", "stream", "invalid_type");
  x->stream = b.value("stream", false);
  if (chat && (!b.contains("messages") || !b["messages"].is_array()))
    return bad("'messages' must be an array", "messages", b.contains("messages") ? "invalid_type" : "missing_field");
  if (!chat && !b.contains("prompt")) return bad("'prompt' is required", "prompt", "missing_field");
  for (const char* f : {"max_tokens", "max_completion_tokens"})
    if (b.contains(f) && !b[f].is_null()) {
      if (!b[f].is_number_integer() || b[f].get<int64_t>() < 1) return bad(std::string("'") + f + "' must be a positive integer", f, "invalid_value");
      x->max_tokens = b[f].get<int64_t>();
    }

  // Tier: as `serve` resolves it; the key's entitlement.
  std::string requested;
  if (b.contains("service_tier") && b["service_tier"].is_string()) {
    auto t = resolve_tier(b["service_tier"].get<std::string>());
    if (!t) return bad("unknown service_tier '" + b["service_tier"].get<std::string>() + "'", "service_tier", "invalid_value");
    requested = *t;
  }
  if (b.contains("priority") && !b["priority"].is_null()) {
    // An int32 as serve reads it: a JSON integer, or a float with an integral value.
    const json& p = b["priority"];
    const double d = p.is_number() ? p.get<double>() : 0.5;
    if (!p.is_number() || std::floor(d) != d || d < INT32_MIN || d > INT32_MAX)
      return bad("'priority' must be an integer (32-bit; higher = more urgent)", "priority", "invalid_type");
    if (cfg_.request_priorities.empty())
      return bad("'priority' is not mapped to tiers on this gateway (request_priorities is empty); name a service_tier instead",
                 "priority", "unsupported_parameter");
    if (requested.empty()) requested = server::tier_for_priority(cfg_.request_priorities, int64_t(d));
  }
  server::KeyState* key = keys_.enabled() ? keys_.authenticate(req.header("authorization")) : nullptr;
  if (requested.empty()) requested = key && !key->config().default_tier.empty() ? key->config().default_tier : cfg_.default_tier;
  std::string tier = requested;
  if (key && !key->allows_tier(requested)) {
    if (cfg_.on_unentitled == server::OnUnentitled::kReject) {
      out->respond(server::error_response(server::tier_not_entitled(requested)));
      return;
    }
    tier = key->served_tier(requested, [this](const std::string& t) { return tier_priority(t); });
    x->degraded_reason = "not_entitled";
    registry_->counter(kDegradations, {requested, tier, "not_entitled"})->inc();
  }
  x->tier_requested = cfg_.tier_index(requested);
  x->tier = cfg_.tier_index(tier);
  if (x->rec) {
    x->rec->tier_requested = requested;
  }

  // Model: by name, or the router's choice.
  const std::string text = prompt_text(b, chat);
  bool estimated = false;
  x->prompt_tokens = prompt_tokens(text, &estimated);
  const std::string asked = b.contains("model") && b["model"].is_string() ? b["model"].get<std::string>() : cfg_.router.name;
  if (x->rec) x->rec->model = asked;
  std::string target;
  if (asked == cfg_.router.name) {
    RouteInput in;
    in.text = text;
    in.prompt_tokens = x->prompt_tokens;
    in.chat = chat;
    in.tier = tier;
    const RouteDecision d = router_->decide(in);
    target = d.target;
    x->route = d.route + (estimated ? ";tokens=estimated" : "");
    registry_->counter(kRouteDecisions, {cfg_.router.name, d.target, d.by})->inc();
    if (cfg_.router.fallback_when_saturated)
      if (auto f = cfg_.router.fallback.find(target); f != cfg_.router.fallback.end())
        x->fallback_model = int(std::find(models_.begin(), models_.end(), f->second) - models_.begin());
  } else {
    if (std::find(models_.begin(), models_.end(), asked) == models_.end()) {
      out->respond(server::error_response(server::model_not_found(asked)));
      return;
    }
    target = asked;
  }
  x->model = int(std::find(models_.begin(), models_.end(), target) - models_.begin());
  // Its version: by the live split, the same one for a key or a conversation if configured.
  {
    std::string sticky;
    if (releases_->sticky(x->model) == Sticky::kKey && key) sticky = key->config().sha256;
    if (releases_->sticky(x->model) == Sticky::kConversation) {
      sticky = std::string(req.header("x-tierserve-conversation"));
      if (sticky.empty()) sticky = conversation_of(b, chat);
    }
    x->unit = releases_->pick(x->model, sticky);
    // Pinned by the client (a load test of one version, a reviewer's check).
    if (const std::string_view pin = req.header("x-tierserve-model-version"); !pin.empty()) {
      const int u = releases_->unit_of(x->model, std::string(pin));
      if (u < 0) return bad("model '" + target + "' has no version '" + std::string(pin) + "'", "x-tierserve-model-version", "unknown_version");
      x->unit = u;
    }
    x->version = releases_->units()[size_t(x->unit)].version;
    if (x->fallback_model >= 0) x->fallback_unit = releases_->pick(x->fallback_model, sticky);
  }

  // The key's limits, once, here: prompt + max_tokens (the default when absent) charged;
  // with redis configured, across every replica.
  if (key) {
    x->charged_tokens = x->prompt_tokens + (x->max_tokens > 0 ? x->max_tokens : cfg_.limits.default_max_tokens);
    auto limited = [&](server::LimitVerdict v, const std::string& message, int64_t retry_after_ms) {
      ApiError e = server::server_error(429, message,
                                        v == server::LimitVerdict::kConcurrent ? "concurrency_limit_exceeded" : "rate_limit_exceeded");
      e.type = "rate_limit_error";
      e.retry_after_ms = std::max<int64_t>(retry_after_ms, 1000);
      out->respond(server::error_response(e));
    };
    bool local = !shared_limits_;
    if (shared_limits_) {
      x->lease_id = replica_id_ + "-" + std::to_string(lease_seq_.fetch_add(1));
      const SharedLimits::Admission a = shared_limits_->admit(key->config(), x->charged_tokens, x->lease_id);
      if (a.outcome == SharedLimits::Outcome::kAdmitted) {
        registry_->counter(kSharedLimits, {"admitted"})->inc();
        x->shared_key = key;
      } else if (a.outcome == SharedLimits::Outcome::kLimited) {
        registry_->counter(kSharedLimits, {"limited"})->inc();
        return limited(a.verdict, a.message, a.retry_after_ms);
      } else {
        registry_->counter(kSharedLimitErrors, {a.error_kind})->inc();
        log_record(LogLevel::kWarn, "shared limits unavailable", {{"error", a.message}, {"on_error", cfg_.redis.fail_open ? "open" : "closed"}});
        if (!cfg_.redis.fail_open) {
          registry_->counter(kSharedLimits, {"unavailable_refused"})->inc();
          ApiError e = server::server_error(503, "the per-key limits shared by the gateways cannot be checked now", "limits_unavailable");
          e.retry_after_ms = 1000;
          out->respond(server::error_response(e));
          return;
        }
        registry_->counter(kSharedLimits, {"unavailable_local"})->inc();
        local = true;
        x->limits_local = true;
      }
    }
    if (local) {
      server::Admission a = key->admit(x->charged_tokens);
      if (a.verdict != server::LimitVerdict::kOk) return limited(a.verdict, a.message, a.retry_after_ms);
      x->key = key;
    }
  }
  // The cache: after the key's limits (a hit counts against them), before any worker.
  if (cache_) {
    x->cache_key = cache_key(b, chat, x->version.empty() ? target : target + "@" + x->version, key);
    if (!x->cache_key.empty()) {
      x->include_usage = b.contains("stream_options") && b["stream_options"].is_object() &&
                         b["stream_options"].value("include_usage", false);
      if (std::optional<CachedAnswer> hit = cache_->get(x->cache_key)) {
        registry_->counter(kCacheRequests, {"hit"})->inc();
        std::lock_guard<std::mutex> lk(x->mu);
        return answer_from_cache(x, *hit);
      }
      registry_->counter(kCacheRequests, {"miss"})->inc();
    }
  }
  {
    std::lock_guard<std::mutex> lk(live_mu_);
    live_.insert(x);
  }
  std::weak_ptr<Exchange> weak = x;
  out->on_disconnect([this, weak] {
    auto x = weak.lock();
    if (!x) return;
    std::shared_ptr<UpstreamCall> c;
    bool cancelled_queued = false;
    {
      std::lock_guard<std::mutex> lk(x->mu);
      if (x->ended) return;
      x->client_gone = true;
      if (x->queued && fleet_->cancel(x->ticket)) {
        x->queued = false;
        cancelled_queued = true;
      }
      c = x->call;
    }
    if (c) c->cancel();
    if (cancelled_queued) {
      std::lock_guard<std::mutex> lk(x->mu);
      x->status = 499;
      end_attempt(x);
    }
  });
  // Admitted, not from the cache: mirrored to the model's shadow version at its fraction.
  if (pair_writer_)
    if (const int su = releases_->shadow_for(x->model, x->unit); su >= 0) launch_shadow(x, su, chat);
  submit(x, false, -1);
}

void Gateway::submit(const std::shared_ptr<Exchange>& x, bool retry, int exclude_worker) {
  Ticket t;
  {
    std::lock_guard<std::mutex> lk(x->mu);
    t.tier = x->tier;
    t.model = x->unit;
    t.fallback_model = x->fallback_unit;
    t.exclude_worker = exclude_worker;
    t.at_head = retry;
  }
  std::weak_ptr<Exchange> weak = x;
  t.on_start = [this, weak](const Placement& p) {
    auto x = weak.lock();
    if (!x) return fleet_->finished(p.ticket);
    start_attempt(x, p);
  };
  t.on_refused = [this, weak](Refusal r, const std::string& msg) {
    auto x = weak.lock();
    if (!x) return;
    std::lock_guard<std::mutex> lk(x->mu);
    x->queued = false;
    if (!x->ended) refuse(x, refusal_error(r, msg));
  };
  t.on_tier_changed = [this, weak](int from, int to, const std::string& reason) {
    auto x = weak.lock();
    if (!x) return;
    std::lock_guard<std::mutex> lk(x->mu);
    x->tier = to;
    x->degraded_reason = reason;
    registry_->counter(kDegradations, {cfg_.tiers[size_t(from)].name, cfg_.tiers[size_t(to)].name, reason})->inc();
  };
  const Fleet::Submitted s = fleet_->submit(std::move(t));
  std::lock_guard<std::mutex> lk(x->mu);
  if (!s.accepted) {
    if (!x->ended) refuse(x, refusal_error(s.why, s.message));
    return;
  }
  if (!x->placed && !x->ended) {
    x->ticket = s.id;
    x->queued = true;
  }
}

void Gateway::start_attempt(const std::shared_ptr<Exchange>& x, const Placement& p) {
  std::unique_lock<std::mutex> lk(x->mu);
  x->queued = false;
  x->ticket = p.ticket;
  if (x->ended || x->client_gone) {
    lk.unlock();
    fleet_->finished(p.ticket);
    return;
  }
  x->placed = true;
  x->placed_ns = clock_.now_ns();
  x->pl = p;
  ++x->attempts;
  x->status = 0;
  x->up_headers.clear();
  x->buffered.clear();
  const WorkerConfig& wc = cfg_.workers[size_t(p.worker)];
  registry_->histogram(kQueueSeconds, {cfg_.tiers[size_t(p.tier)].name})->observe(double(p.queue_ns) / 1e9);
  registry_->counter(kPlacements, {cfg_.tiers[size_t(p.tier)].name, fleet_->pools()[size_t(p.pool)],
                                   p.borrowed ? "borrowed" : p.pool_fallback ? "fallback" : "own"})
      ->inc();
  registry_->gauge(kWorkerInflight, {wc.name})->add(1);
  if (p.model_fallback && x->degraded_reason.empty()) {
    x->degraded_reason = "model_fallback";
    registry_->counter(kDegradations, {cfg_.tiers[size_t(x->tier_requested)].name, cfg_.tiers[size_t(p.tier)].name,
                                       "model_fallback"})
        ->inc();
  }
  x->unit = p.model;
  x->model = releases_->units()[size_t(p.model)].model;
  x->version = releases_->units()[size_t(p.model)].version;
  x->tier = p.tier;
  x->rewrite_model = wc.served_as() != wc.model;
  // The worker's body: its model name and the tier in its terms.
  json body = x->body;
  body["model"] = wc.served_as();
  body.erase("service_tier");
  body.erase("priority");
  const std::string& tier_name = cfg_.tiers[size_t(p.tier)].name;
  if (wc.kind == WorkerKind::kLocal || wc.kind == WorkerKind::kTierserve) body["service_tier"] = tier_name;
  if (wc.kind == WorkerKind::kVllm) body["priority"] = p.tier;  // vLLM: lower runs first
  UpstreamRequest req;
  req.path = x->path;
  req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!x->request_id.empty()) req.headers.emplace_back("x-request-id", x->request_id);
  if (!x->traceparent.empty()) req.headers.emplace_back("traceparent", x->traceparent);
  if (!wc.api_key.empty()) req.headers.emplace_back("authorization", "Bearer " + wc.api_key);
  std::shared_ptr<UpstreamPool> pool = workers_->pool(p.worker);
  if (!pool) {
    lk.unlock();
    fleet_->finished(p.ticket);
    registry_->gauge(kWorkerInflight, {wc.name})->add(-1);
    lk.lock();
    x->placed = false;
    const bool retry = x->attempts < 2;
    lk.unlock();
    if (retry) return submit(x, true, p.worker);
    lk.lock();
    x->status = 502;
    respond_to(x, server::error_response(server::server_error(502, "worker " + wc.name + " has no address", "worker_error")));
    end_attempt(x);
    return;
  }
  std::weak_ptr<Exchange> weak = x;
  UpstreamHandlers h;
  h.on_head = [this, weak](int status, const server::Headers& headers) {
    auto x = weak.lock();
    if (!x) return;
    std::lock_guard<std::mutex> lk(x->mu);
    x->status = status;
    x->up_headers = headers;
    if (x->ended || !x->stream || status != 200) return;
    if (!x->client_started) {
      HttpResponse r;
      r.content_type = "text/event-stream";
      r.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
      const WorkerConfig& wc = cfg_.workers[size_t(x->pl.worker)];
      auto add = [&](const std::string& k, const std::string& v) {
        if (!v.empty()) r.headers.emplace_back(k, v);
      };
      for (const auto& [k, v] : headers)
        if (!hop_by_hop(k) && k != "x-tierserve-tier-served" && k != "x-tierserve-degraded-reason") r.headers.emplace_back(k, v);
      add("x-tierserve-model-served", wc.model);
      add("x-tierserve-model-version", x->version);
      add("x-tierserve-route", x->route);
      add("x-tierserve-worker", wc.name);
      add("x-tierserve-pool", fleet_->pools()[size_t(x->pl.pool)]);
      add("x-tierserve-pool-reason", x->pl.borrowed ? "borrowed" : x->pl.pool_fallback ? "fallback" : "");
      add("x-tierserve-tier-requested", cfg_.tiers[size_t(x->tier_requested)].name);
      add("x-tierserve-limits", x->limits_local ? "local" : "");
      add("x-tierserve-cache", x->cache_key.empty() ? "" : "miss");
      const std::string worker_tier = header_of(headers, "x-tierserve-tier-served");
      add("x-tierserve-tier-served", worker_tier.empty() ? cfg_.tiers[size_t(x->tier)].name : worker_tier);
      const std::string worker_reason = header_of(headers, "x-tierserve-degraded-reason");
      add("x-tierserve-degraded-reason", x->degraded_reason.empty() ? worker_reason : x->degraded_reason);
      x->out->start_stream(std::move(r));
      x->client_started = true;
    }
  };
  h.on_data = [this, weak](std::string_view bytes) {
    auto x = weak.lock();
    if (!x) return;
    std::lock_guard<std::mutex> lk(x->mu);
    if (x->ended) return;
    if (!x->first_byte_ns) {
      x->first_byte_ns = clock_.now_ns();
      registry_->histogram(kTtftSeconds, {cfg_.tiers[size_t(x->tier)].name})->observe(double(x->first_byte_ns - x->arrived_ns) / 1e9);
    }
    if (!x->stream || x->status != 200) {
      if (x->buffered.size() < (16u << 20)) x->buffered.append(bytes);
      return;
    }
    // Forward whole events; peek at each for usage and content, and give the response the
    // model name the client knows when the worker answers to another.
    x->sse_tail.append(bytes);
    std::string outgoing;
    size_t start = 0;
    for (;;) {
      const size_t end = x->sse_tail.find("\n\n", start);
      if (end == std::string::npos) break;
      std::string ev = x->sse_tail.substr(start, end + 2 - start);
      start = end + 2;
      if (ev.rfind("data: {", 0) == 0) {
        const bool has_usage = ev.find("\"usage\":{") != std::string::npos;
        const bool for_cache = (!x->cache_key.empty() && !x->cache_spoiled) || x->pair;
        if (has_usage || x->rewrite_model || for_cache) {
          json j = json::parse(std::string_view(ev).substr(6, ev.size() - 8), nullptr, false);
          if (for_cache) note_for_cache(*x, j);
          if (j.is_object()) {
            if (has_usage && j["usage"].is_object() && j["usage"].contains("completion_tokens") &&
                j["usage"]["completion_tokens"].is_number_integer())
              x->completion_tokens = j["usage"]["completion_tokens"].get<int64_t>();
            if (x->rewrite_model && j.contains("model")) {
              j["model"] = cfg_.workers[size_t(x->pl.worker)].model;
              ev = server::sse_data(j.dump(-1, ' ', false, json::error_handler_t::replace));
            }
          }
        }
        if (ev.find("\"content\":\"") != std::string::npos || ev.find("\"text\":\"") != std::string::npos) ++x->content_chunks;
      }
      outgoing += ev;
    }
    x->sse_tail.erase(0, start);
    if (!outgoing.empty()) {
      x->body_bytes += int64_t(outgoing.size());
      x->out->send(std::move(outgoing));
    }
  };
  h.on_end = [this, weak](UpstreamError e, const std::string& detail) {
    auto x = weak.lock();
    if (!x) return;
    std::unique_lock<std::mutex> lk(x->mu);
    const Placement p = x->pl;
    const WorkerConfig& wc = cfg_.workers[size_t(p.worker)];
    x->call.reset();
    x->placed = false;
    lk.unlock();
    fleet_->finished(p.ticket);
    registry_->gauge(kWorkerInflight, {wc.name})->add(-1);
    lk.lock();
    if (x->ended) return;
    const bool gateway_abort = e == UpstreamError::kCancelled && x->aborted;
    if (e == UpstreamError::kTimeout) x->timed_out = true;
    if (e != UpstreamError::kNone && !(e == UpstreamError::kCancelled && !x->aborted)) {
      const std::string kind = gateway_abort ? "unreachable" : std::string(upstream_error_name(e));
      registry_->counter(kWorkerErrors, {wc.name, kind})->inc();
      if (!gateway_abort) workers_->report_failure(p.worker);
    }
    if (e == UpstreamError::kCancelled && !x->aborted) {  // the client went away
      x->status = 499;
      end_attempt(x);
      return;
    }
    // A retryable failure: the worker answered nothing the client saw (a transport error,
    // or 502/503/504 from a worker that is going away), and this was the first attempt.
    const bool transport = e != UpstreamError::kNone;
    const bool retry_status = !transport && (x->status == 502 || x->status == 503 || x->status == 504) &&
                              header_of(x->up_headers, "content-type").find("text/event-stream") == std::string::npos;
    if ((transport || retry_status) && x->body_bytes == 0 && x->attempts < 2 && !x->client_gone) {
      registry_->counter(kRetries, {wc.name})->inc();
      x->aborted = false;
      x->sse_tail.clear();
      lk.unlock();
      return submit(x, true, p.worker);
    }
    if (transport) {
      const ApiError err = server::server_error(502, "worker " + wc.name + " failed: " + std::string(upstream_error_name(e)) +
                                                         (detail.empty() ? "" : " (" + detail + ")"),
                                                "worker_error");
      x->status = 502;
      if (x->rec) x->rec->error_code = "worker_error";
      if (x->client_started) {
        x->out->send(server::sse_data(err.to_json()));
        x->out->send(std::string(server::kSseDone));
        end_to(x);
      } else {
        respond_to(x, server::error_response(err));
      }
      end_attempt(x);
      return;
    }
    if (x->stream && x->status == 200) {
      if (!x->sse_tail.empty()) {  // a last event without its blank line: not a whole answer
        x->cache_spoiled = true;
        x->out->send(std::move(x->sse_tail));
      }
      store_in_cache(*x, nullptr);
      end_to(x);
      end_attempt(x);
      return;
    }
    // A whole body (or an error the worker answered): passed on, the model name fixed.
    HttpResponse r;
    r.status = x->status;
    const std::string ct = header_of(x->up_headers, "content-type");
    r.content_type = ct.empty() ? "application/json" : ct;
    json j = json::parse(x->buffered, nullptr, false);
    const bool is_json = j.is_object();
    if (is_json && x->status == 200) {
      if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens") &&
          j["usage"]["completion_tokens"].is_number_integer())
        x->completion_tokens = j["usage"]["completion_tokens"].get<int64_t>();
      store_in_cache(*x, &j);
      if (x->pair) x->answer_text = answer_text(j, x->chat);
      if (x->rewrite_model && j.contains("model")) {
        j["model"] = wc.model;
        x->buffered = j.dump(-1, ' ', false, json::error_handler_t::replace);
      }
    }
    if (x->status >= 400 && !is_json) {
      // A worker error that is not OpenAI's shape: said as one, and counted.
      registry_->counter(kWorkerErrors, {wc.name, "bad_error_body"})->inc();
      const ApiError err = server::server_error(502, "worker " + wc.name + " answered HTTP " + std::to_string(x->status) +
                                                         " without an OpenAI error body",
                                                "worker_error");
      x->status = 502;
      HttpResponse e2 = server::error_response(err);
      r = std::move(e2);
    } else if (x->status == 200 && !is_json && !x->stream) {
      registry_->counter(kWorkerErrors, {wc.name, "bad_body"})->inc();
      r = server::error_response(server::server_error(502, "worker " + wc.name + " answered a body that is not JSON", "worker_error"));
      x->status = 502;
    } else if (x->stream && x->status == 200) {
      r.body = x->buffered;
    } else {
      r.body = x->buffered;
    }
    if (x->status >= 400 && x->rec) x->rec->error_code = server::error_code_of(r.body);
    for (const auto& [k, v] : x->up_headers)
      if (!hop_by_hop(k) && k != "x-tierserve-tier-served" && k != "x-tierserve-degraded-reason" && k != "retry-after")
        r.headers.emplace_back(k, v);
    if (const std::string ra = header_of(x->up_headers, "retry-after"); !ra.empty() && x->status == r.status) r.headers.emplace_back("Retry-After", ra);
    r.headers.emplace_back("x-tierserve-model-served", wc.model);
    if (!x->version.empty()) r.headers.emplace_back("x-tierserve-model-version", x->version);
    if (!x->route.empty()) r.headers.emplace_back("x-tierserve-route", x->route);
    r.headers.emplace_back("x-tierserve-worker", wc.name);
    r.headers.emplace_back("x-tierserve-pool", fleet_->pools()[size_t(p.pool)]);
    if (p.borrowed || p.pool_fallback) r.headers.emplace_back("x-tierserve-pool-reason", p.borrowed ? "borrowed" : "fallback");
    r.headers.emplace_back("x-tierserve-tier-requested", cfg_.tiers[size_t(x->tier_requested)].name);
    if (x->limits_local) r.headers.emplace_back("x-tierserve-limits", "local");
    if (!x->cache_key.empty()) r.headers.emplace_back("x-tierserve-cache", "miss");
    const std::string worker_tier = header_of(x->up_headers, "x-tierserve-tier-served");
    r.headers.emplace_back("x-tierserve-tier-served", worker_tier.empty() ? cfg_.tiers[size_t(x->tier)].name : worker_tier);
    const std::string reason = x->degraded_reason.empty() ? header_of(x->up_headers, "x-tierserve-degraded-reason") : x->degraded_reason;
    if (!reason.empty()) r.headers.emplace_back("x-tierserve-degraded-reason", reason);
    if (x->client_started) {  // a queued stream whose headers went out: the answer in-stream
      x->out->send(server::sse_data(r.body));
      x->out->send(std::string(server::kSseDone));
      end_to(x);
    } else {
      respond_to(x, std::move(r));
    }
    end_attempt(x);
  };
  x->call = pool->send(std::move(req), std::move(h));
}

// The access line's fields, before the response (or the stream's end) goes out: the line is
// written then. Called with x->mu held.
void Gateway::fill_record(Exchange& x) const {
  if (x.completion_tokens < 0 && x.stream && x.status == 200) x.completion_tokens = x.content_chunks;
  if (!x.rec) return;
  x.rec->tier_served = cfg_.tiers[size_t(x.tier)].name;
  x.rec->degraded_reason = x.degraded_reason;
  x.rec->prompt_tokens = x.prompt_tokens;
  if (x.completion_tokens >= 0) x.rec->completion_tokens = x.completion_tokens;
  if (x.pl.worker >= 0) {
    x.rec->queue_ms = double(x.pl.queue_ns) / 1e6;
    x.rec->model = cfg_.workers[size_t(x.pl.worker)].model;
  }
  x.rec->model_version = x.version;
  if (x.first_byte_ns) x.rec->ttft_ms = double(x.first_byte_ns - x.arrived_ns) / 1e6;
}

// Ends a request the fleet refused: the error in-stream when its headers went out already
// (a queued stream), else as the response. Called with x->mu held.
void Gateway::refuse(const std::shared_ptr<Exchange>& x, const ApiError& e) {
  x->status = e.status;
  if (x->rec) x->rec->error_code = e.code;
  if (x->client_started) {
    x->out->send(server::sse_data(e.to_json()));
    x->out->send(std::string(server::kSseDone));
    end_to(x);
  } else {
    HttpResponse resp = server::error_response(e);
    resp.headers.emplace_back("x-tierserve-tier-requested", cfg_.tiers[size_t(x->tier_requested)].name);
    respond_to(x, std::move(resp));
    x->client_started = true;
  }
  end_attempt(x);
}

// The cache's key for a deterministic request ("" for any other): the scope (the API key's
// hash, unless the cache is shared), the model that will serve it, the endpoint, and the
// request without what does not change the answer (stream, stream_options, service_tier,
// priority, user, model), as sorted JSON, hashed.
std::string Gateway::cache_key(const json& b, bool chat, const std::string& model, const server::KeyState* key) const {
  const auto t = b.find("temperature");
  const bool greedy = t != b.end() && t->is_number() && t->get<double>() == 0.0;
  const bool seeded = b.contains("seed") && b["seed"].is_number_integer();
  if (!greedy && !seeded) return "";
  for (const char* f : {"logprobs", "top_logprobs"})
    if (b.contains(f) && !b[f].is_null() && !(b[f].is_boolean() && !b[f].get<bool>())) return "";
  if (b.contains("n") && !(b["n"].is_number_integer() && b["n"].get<int64_t>() == 1)) return "";
  json n = b;
  for (const char* f : {"stream", "stream_options", "service_tier", "priority", "user", "model"}) n.erase(f);
  const std::string scope = cfg_.cache.shared ? "shared" : key ? key->config().sha256 : "anonymous";
  return server::sha256_hex(scope + "\n" + model + "\n" + (chat ? "chat" : "completion") + "\n" +
                            n.dump(-1, ' ', false, json::error_handler_t::replace));
}

// One streamed event of a cacheable miss: its text, finish reason and usage; an error
// event spoils the answer. Called with x.mu held.
void Gateway::note_for_cache(Exchange& x, const json& j) {
  if (!j.is_object() || j.contains("error")) {
    x.cache_spoiled = true;
    return;
  }
  if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("prompt_tokens") && j["usage"]["prompt_tokens"].is_number_integer())
    x.usage_prompt = j["usage"]["prompt_tokens"].get<int64_t>();
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
  const json& c = j["choices"][0];
  if (!c.is_object()) return;
  const json* piece = nullptr;
  if (x.chat && c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content")) piece = &c["delta"]["content"];
  if (!x.chat && c.contains("text")) piece = &c["text"];
  if (piece && piece->is_string()) x.cached_text += piece->get<std::string>();
  if (c.contains("finish_reason") && c["finish_reason"].is_string()) x.cached_finish = c["finish_reason"].get<std::string>();
}

// A hit answered like a miss: the same body or chunks under a fresh id, said in
// x-tierserve-cache. Called with x->mu held; the exchange ends here.
void Gateway::answer_from_cache(const std::shared_ptr<Exchange>& x, const CachedAnswer& a) {
  server::ResponseHead h;
  h.endpoint = x->chat ? server::Endpoint::kChat : server::Endpoint::kCompletions;
  h.id = server::make_response_id(h.endpoint);
  h.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  h.model = models_[size_t(x->model)];
  server::ServedInfo si;
  si.tier_requested = cfg_.tiers[size_t(x->tier_requested)].name;
  si.tier_served = cfg_.tiers[size_t(x->tier)].name;
  si.service_tier = server::openai_service_tier(si.tier_served, cfg_.tier_aliases);
  si.degraded_reason = x->degraded_reason;
  server::UsageInfo u;
  u.prompt_tokens = a.prompt_tokens;
  u.completion_tokens = a.completion_tokens;
  server::Headers hs = {{"x-tierserve-cache", "hit"}, {"x-tierserve-model-served", h.model},
                        {"x-tierserve-tier-requested", si.tier_requested}, {"x-tierserve-tier-served", si.tier_served}};
  if (!x->route.empty()) hs.emplace_back("x-tierserve-route", x->route);
  if (!x->version.empty()) hs.emplace_back("x-tierserve-model-version", x->version);
  if (!x->degraded_reason.empty()) hs.emplace_back("x-tierserve-degraded-reason", x->degraded_reason);
  x->status = 200;
  x->completion_tokens = a.completion_tokens;
  x->prompt_tokens = a.prompt_tokens;
  if (x->stream) {
    HttpResponse r;
    r.content_type = "text/event-stream";
    r.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    r.headers.insert(r.headers.end(), hs.begin(), hs.end());
    x->out->start_stream(std::move(r));
    x->client_started = true;
    x->out->send(server::sse_data(server::chunk_json(h, a.text, true, "", si.service_tier, nullptr, x->include_usage)));
    x->out->send(server::sse_data(server::chunk_json(h, "", false, a.finish_reason, si.service_tier, nullptr, x->include_usage)));
    if (x->include_usage) x->out->send(server::sse_data(server::usage_chunk_json(h, u, si)));
    x->out->send(std::string(server::kSseDone));
    end_to(x);
  } else {
    HttpResponse r;
    r.body = server::completion_body(h, a.text, a.finish_reason, u, si);
    r.headers = hs;
    respond_to(x, std::move(r));
  }
  end_attempt(x);
}

// A miss that ended well is kept: a whole 200 answer that finished by stop or length, from
// the model the key names, with its token counts. Called with x->mu held.
void Gateway::store_in_cache(Exchange& x, const json* body) {
  if (!cache_ || x.cache_key.empty() || x.cache_spoiled || x.pl.model_fallback || x.status != 200 || x.client_gone) return;
  CachedAnswer a;
  if (body) {
    if (!body->is_object() || !body->contains("choices") || !(*body)["choices"].is_array() || (*body)["choices"].empty()) return;
    const json& c = (*body)["choices"][0];
    const json* text = nullptr;
    if (x.chat && c.contains("message") && c["message"].is_object() && c["message"].contains("content")) text = &c["message"]["content"];
    if (!x.chat && c.contains("text")) text = &c["text"];
    if (!text || !text->is_string() || !c.contains("finish_reason") || !c["finish_reason"].is_string()) return;
    a.text = text->get<std::string>();
    a.finish_reason = c["finish_reason"].get<std::string>();
    const json* u = body->contains("usage") && (*body)["usage"].is_object() ? &(*body)["usage"] : nullptr;
    if (!u || !u->contains("prompt_tokens") || !(*u)["prompt_tokens"].is_number_integer() || !u->contains("completion_tokens") ||
        !(*u)["completion_tokens"].is_number_integer())
      return;
    a.prompt_tokens = (*u)["prompt_tokens"].get<int64_t>();
    a.completion_tokens = (*u)["completion_tokens"].get<int64_t>();
  } else {  // a stream: what its chunks said; only with its usage chunk (the token counts)
    if (x.usage_prompt < 0 || x.completion_tokens < 0) return;
    a.text = x.cached_text;
    a.finish_reason = x.cached_finish;
    a.prompt_tokens = x.usage_prompt;
    a.completion_tokens = x.completion_tokens;
  }
  if (a.finish_reason != "stop" && a.finish_reason != "length") return;
  cache_->put(x.cache_key, std::move(a));
}

void Gateway::respond_to(const std::shared_ptr<Exchange>& x, HttpResponse r) {
  fill_record(*x);
  x->out->respond(std::move(r));
}

void Gateway::end_to(const std::shared_ptr<Exchange>& x) {
  fill_record(*x);
  x->out->end();
}

// Ends the exchange: the key's refund, the ledger. Called with x->mu held, once, after the
// response went out (a client that went away is answered here).
void Gateway::end_attempt(const std::shared_ptr<Exchange>& x) {
  if (x->ended) return;
  x->ended = true;
  if (x->status == 499) {  // the client went away: the exchange still ends (and is logged)
    if (x->rec) x->rec->error_code = "cancelled";
    if (x->client_started) end_to(x);
    else respond_to(x, server::error_response(server::server_error(499, "the client closed the request", "cancelled")));
  }
  fill_record(*x);
  const int64_t used = x->completion_tokens >= 0 ? x->prompt_tokens + x->completion_tokens : x->charged_tokens;
  if (x->key) {
    x->key->release(std::max<int64_t>(0, x->charged_tokens - used));
    x->key = nullptr;
  }
  if (x->shared_key) {
    std::string err;
    if (!shared_limits_->release(x->shared_key->config(), x->charged_tokens - used, x->lease_id, &err)) {
      registry_->counter(kSharedLimitErrors, {"release"})->inc();
      log_record(LogLevel::kWarn, "shared limits: a release failed (the slot's lease expires by itself)", {{"error", err}});
    }
    x->shared_key = nullptr;
  }
  const std::string tier = cfg_.tiers[size_t(x->tier_requested)].name;
  const std::string model = x->pl.worker >= 0 ? cfg_.workers[size_t(x->pl.worker)].model : models_[size_t(x->model)];
  std::string outcome = x->status == 200 ? "ok" : x->status == 499 ? "cancelled" : x->status == 429 || x->status == 503 ? "rejected" : "error";
  if (x->status == 200 && x->rec && !x->rec->error_code.empty()) outcome = "error";
  registry_->counter(kRequests, {tier, model, x->version, outcome})->inc();
  if (x->pair) {
    PairSide side;
    side.version = x->version;
    side.status = x->status;
    side.text = x->stream ? x->cached_text : x->answer_text;
    side.error = x->rec ? x->rec->error_code : "";
    side.completion_tokens = x->completion_tokens;
    const int64_t now = clock_.now_ns();
    if (x->first_byte_ns > 0) side.ttft_ms = double(x->first_byte_ns - x->arrived_ns) / 1e6;
    side.latency_ms = double(now - x->arrived_ns) / 1e6;
    if (x->pl.worker >= 0) {
      const WorkerConfig& wc = cfg_.workers[size_t(x->pl.worker)];
      side.cost = double(now - x->placed_ns) / 1e9 * wc.cost_per_hour / 3600.0 / double(std::max(1, wc.max_inflight));
    }
    std::shared_ptr<ShadowPair> pair = std::move(x->pair);
    {
      std::lock_guard<std::mutex> pl(pair->mu);
      pair->row.stable = std::move(side);
    }
    finish_pair(pair);
  }
  if (x->pl.worker >= 0 && x->status != 499) {  // what its version did, for a canary's judgement
    const WorkerConfig& wc = cfg_.workers[size_t(x->pl.worker)];
    const int64_t now = clock_.now_ns();
    ReleaseSample rs;
    rs.t_ns = now;
    rs.tier = x->tier_requested;
    if (x->first_byte_ns > 0) {
      rs.ttft_s = double(x->first_byte_ns - x->arrived_ns) / 1e9;
      if (x->completion_tokens > 1) rs.tpot_s = double(now - x->first_byte_ns) / 1e9 / double(x->completion_tokens - 1);
    }
    rs.timeout = x->timed_out || x->status == 504;
    rs.error = !rs.timeout && (x->status >= 500 || outcome == "error");
    rs.degraded = !x->degraded_reason.empty();
    rs.cost = double(now - x->placed_ns) / 1e9 * wc.cost_per_hour / 3600.0 / double(std::max(1, wc.max_inflight));
    releases_->record(x->unit, rs);
  }
  std::lock_guard<std::mutex> lk(live_mu_);
  live_.erase(x);
}

void Gateway::abort_calls_on(int worker) {
  std::vector<std::shared_ptr<Exchange>> xs;
  {
    std::lock_guard<std::mutex> lk(live_mu_);  // never held with an exchange's lock
    xs.assign(live_.begin(), live_.end());
  }
  std::vector<std::shared_ptr<UpstreamCall>> calls;
  for (const auto& x : xs) {
    std::lock_guard<std::mutex> xl(x->mu);
    if (x->placed && x->pl.worker == worker && x->call) {
      x->aborted = true;
      calls.push_back(x->call);
    }
  }
  for (auto& c : calls) c->cancel();
}

// A copy of the request to the shadow unit, on the shadow tier (below every paying one:
// placed only where they leave room, dropped when no slot frees in time), whole (not
// streamed) and at the worker's lowest tier; its answer goes into the pair, never to the
// client.
void Gateway::launch_shadow(const std::shared_ptr<Exchange>& x, int unit, bool chat) {
  auto pair = std::make_shared<ShadowPair>();
  pair->row.at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  pair->row.model = models_[size_t(x->model)];
  pair->row.endpoint = chat ? "chat" : "completions";
  pair->row.request = x->body.dump(-1, ' ', false, json::error_handler_t::replace);
  pair->row.shadow.version = releases_->units()[size_t(unit)].version;
  x->pair = pair;
  auto body = std::make_shared<json>(x->body);
  body->erase("stream");
  body->erase("stream_options");
  body->erase("service_tier");
  body->erase("priority");
  const std::string path = x->path;
  const int64_t arrived = clock_.now_ns();
  Ticket t;
  t.tier = shadow_tier_;
  t.model = unit;
  auto fail = [this, pair](const std::string& why) {
    {
      std::lock_guard<std::mutex> lk(pair->mu);
      pair->row.shadow.status = 0;
      pair->row.shadow.error = why;
    }
    registry_->counter(kShadow, {pair->row.model, "dropped"})->inc();
    finish_pair(pair);
  };
  t.on_refused = [fail](Refusal r, const std::string&) { fail(std::string(refusal_code(r))); };
  t.on_start = [this, pair, body, path, arrived, fail](const Placement& p) {
    const WorkerConfig& wc = cfg_.workers[size_t(p.worker)];
    std::shared_ptr<UpstreamPool> pool = workers_->pool(p.worker);
    if (!pool) {
      fleet_->finished(p.ticket);
      return fail("worker " + wc.name + " has no address");
    }
    json b = *body;
    b["model"] = wc.served_as();
    if (wc.kind == WorkerKind::kLocal || wc.kind == WorkerKind::kTierserve) b["service_tier"] = cfg_.tiers.back().name;
    if (wc.kind == WorkerKind::kVllm) b["priority"] = int(cfg_.tiers.size());
    UpstreamRequest req;
    req.path = path;
    req.body = b.dump(-1, ' ', false, json::error_handler_t::replace);
    if (!wc.api_key.empty()) req.headers.emplace_back("authorization", "Bearer " + wc.api_key);
    struct Got {
      int status = 0;
      std::string body;
      int64_t first_ns = 0, placed_ns = 0;
    };
    auto got = std::make_shared<Got>();
    got->placed_ns = clock_.now_ns();
    UpstreamHandlers h;
    h.on_head = [got](int status, const server::Headers&) { got->status = status; };
    h.on_data = [this, got](std::string_view bytes) {
      if (!got->first_ns) got->first_ns = clock_.now_ns();
      if (got->body.size() < (size_t(8) << 20)) got->body.append(bytes);
    };
    h.on_end = [this, pair, got, arrived, ticket = p.ticket, w = p.worker](UpstreamError e, const std::string& detail) {
      fleet_->finished(ticket);
      const WorkerConfig& wc = cfg_.workers[size_t(w)];
      const int64_t now = clock_.now_ns();
      PairSide& s = pair->row.shadow;
      {
        std::lock_guard<std::mutex> lk(pair->mu);
        s.status = e == UpstreamError::kNone ? got->status : 502;
        if (got->first_ns) s.ttft_ms = double(got->first_ns - arrived) / 1e6;
        s.latency_ms = double(now - arrived) / 1e6;
        s.cost = double(now - got->placed_ns) / 1e9 * wc.cost_per_hour / 3600.0 / double(std::max(1, wc.max_inflight));
        const json j = json::parse(got->body, nullptr, false);
        if (e != UpstreamError::kNone) s.error = std::string(upstream_error_name(e)) + (detail.empty() ? "" : " (" + detail + ")");
        else if (s.status != 200) s.error = server::error_code_of(got->body);
        s.text = answer_text(j, pair->row.endpoint == "chat");
        if (j.is_object() && j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens") &&
            j["usage"]["completion_tokens"].is_number_integer())
          s.completion_tokens = j["usage"]["completion_tokens"].get<int64_t>();
      }
      if (s.status != 200) registry_->counter(kShadow, {pair->row.model, "error"})->inc();
      finish_pair(pair);
    };
    pool->send(std::move(req), std::move(h));
  };
  const Fleet::Submitted s = fleet_->submit(std::move(t));
  if (!s.accepted) fail(std::string(refusal_code(s.why)));
}

void Gateway::finish_pair(const std::shared_ptr<ShadowPair>& pair) {
  PairRow row;
  {
    std::lock_guard<std::mutex> lk(pair->mu);
    if (++pair->sides < 2) return;
    row = std::move(pair->row);
  }
  const std::string model = row.model;
  if (!pair_writer_->push(std::move(row))) registry_->counter(kShadow, {model, "dropped"})->inc();
}

// /admin/models/{name}[/weights|/rollback|/stable|/events]: the model's versions and
// split (GET), a new split, a rollback to the stable version, the stable version named
// (POST), the event log (GET). Errors in OpenAI's shape; a failed change changes nothing.
void Gateway::release_admin(const HttpRequest& req, std::shared_ptr<Responder> out) {
  std::string rest = req.path.substr(std::string("/admin/models/").size());
  std::string op;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    op = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  const bool post = req.method == "POST";
  json body = json::object(), result;
  if (post && !req.body.empty()) {
    body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) {
      out->respond(server::error_response(server::bad_request("the body is not JSON", "", "invalid_json")));
      return;
    }
  }
  const std::string by = req.header("x-tierserve-operator").empty() ? "admin" : std::string(req.header("x-tierserve-operator"));
  Releases::Error e;
  if (!post && op.empty()) e = releases_->state(rest, &result);
  else if (!post && op == "events") e = releases_->events(rest, &result);
  else if (post && op == "weights") e = releases_->set_weights(rest, body, by, &result);
  else if (post && op == "rollback") e = releases_->rollback(rest, by, &result);
  else if (post && op == "stable") e = releases_->set_stable(rest, body, by, &result);
  else e = {404, "not_found", "no such route: " + req.method + " " + req.path};
  if (e) {
    ApiError a = server::server_error(e.status, e.message, e.code);
    if (e.status < 500) a.type = "invalid_request_error";
    out->respond(server::error_response(a));
    return;
  }
  if (post) log_record(LogLevel::kInfo, "release " + op, {{"model", rest}, {"by", by}, {"state", result.dump()}});
  HttpResponse r;
  r.body = result.dump();
  out->respond(std::move(r));
}

void Gateway::models(std::shared_ptr<Responder> out) const {
  json data = json::array();
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (const auto& m : models_) {
    json workers = json::array();
    for (const auto& w : cfg_.workers)
      if (w.model == m) workers.push_back(w.name);
    data.push_back({{"id", m}, {"object", "model"}, {"created", now}, {"owned_by", "tierserve"}, {"workers", workers}});
  }
  data.push_back({{"id", cfg_.router.name}, {"object", "model"}, {"created", now}, {"owned_by", "tierserve"},
                  {"router", true}, {"models", models_}});
  HttpResponse r;
  r.body = json{{"object", "list"}, {"data", data}}.dump();
  out->respond(std::move(r));
}

void Gateway::model(const HttpRequest& req, std::shared_ptr<Responder> out) const {
  const std::string id = req.path.substr(std::string("/v1/models/").size());
  if (id != cfg_.router.name && std::find(models_.begin(), models_.end(), id) == models_.end()) {
    out->respond(server::error_response(server::model_not_found(id)));
    return;
  }
  HttpResponse r;
  r.body = json{{"id", id}, {"object", "model"}, {"owned_by", "tierserve"}}.dump();
  out->respond(std::move(r));
}

void Gateway::health(std::shared_ptr<Responder> out, bool ready) const {
  HttpResponse r;
  if (!ready) {
    r.body = R"({"status":"live"})";
    out->respond(std::move(r));
    return;
  }
  bool any = false;
  for (bool up : fleet_->up_per_worker()) any = any || up;
  if (draining_.load() || !any) {
    r.status = 503;
    r.headers.emplace_back("Retry-After", "1");
    r.body = json{{"status", draining_.load() ? "draining" : "no_worker_ready"}}.dump();
  } else {
    r.body = R"({"status":"ready"})";
  }
  out->respond(std::move(r));
}

void Gateway::metrics_text(std::shared_ptr<Responder> out) const {
  if (cache_) {
    const CacheStore::Stats cs = cache_->stats();
    if (cs.bytes >= 0) registry_->gauge(kCacheBytes)->set(double(cs.bytes));
    if (cs.entries >= 0) registry_->gauge(kCacheEntries)->set(double(cs.entries));
    std::lock_guard<std::mutex> lk(cache_metrics_mu_);
    auto delta = [&](int64_t now, int64_t& seen, metrics::Counter* c) {
      if (now > seen) c->inc(double(now - seen));
      seen = now;
    };
    delta(cs.evictions, cache_seen_.evictions, registry_->counter(kCacheEvictions));
    delta(cs.errors, cache_seen_.errors, registry_->counter(kCacheErrors, {"redis"}));
    delta(cs.corrupt, cache_seen_.corrupt, registry_->counter(kCacheErrors, {"corrupt_entry"}));
  }
  HttpResponse r;
  r.content_type = std::string(metrics::kPrometheusContentType);
  r.body = metrics::format_prometheus(registry_->snapshot());
  r.body += metrics::process_metrics_text(metrics::read_process_stats());
  out->respond(std::move(r));
}

void Gateway::stats(std::shared_ptr<Responder> out) const {
  json workers = json::array();
  const auto inflight = fleet_->inflight_per_worker();
  const auto infos = workers_->info();
  for (size_t i = 0; i < infos.size(); ++i) {
    const auto& w = infos[i];
    workers.push_back({{"name", w.name},
                       {"kind", w.kind},
                       {"model", w.model},
                       {"pool", w.pool},
                       {"url", w.url},
                       {"up", w.up},
                       {"pid", w.pid},
                       {"restarts", w.restarts},
                       {"health_failures", w.health_failures},
                       {"inflight", inflight[i]},
                       {"load", {{"waiting", w.load.waiting}, {"running", w.load.running}, {"kv_usage", w.load.kv_usage}}},
                       {"last_error", w.last_error}});
  }
  json queued = json::object();
  const auto q = fleet_->queued_per_tier();
  for (size_t t = 0; t < q.size(); ++t) queued[cfg_.tiers[t].name] = q[t];
  size_t live;
  {
    std::lock_guard<std::mutex> lk(live_mu_);
    live = live_.size();
  }
  HttpResponse r;
  r.body = json{{"draining", draining_.load()}, {"n_active", live}, {"queued", queued}, {"workers", workers},
                {"models", models_}, {"router", cfg_.router.name}}
               .dump(-1, ' ', false, json::error_handler_t::replace);
  out->respond(std::move(r));
}

}  // namespace ts::gateway
