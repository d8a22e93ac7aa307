#include "gateway/gateway.h"

#include "gateway_impl.h"

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

// ---------------------------------------------------------------------------------------
// Metrics

namespace {

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
  for (const TierConfig& t : cfg.tiers) g->tier_names_.push_back(t.name);
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
  return server::resolve_service_tier(asked, tier_names_, cfg_.tier_aliases);
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
