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

namespace internal {

// The text of a whole completion body ("" when it has none).
std::string answer_text(const json& j, bool chat) {
  if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return "";
  const json& c = j["choices"][0];
  const json* t = chat && c.contains("message") && c["message"].is_object() && c["message"].contains("content")
                      ? &c["message"]["content"]
                      : !chat && c.contains("text") ? &c["text"] : nullptr;
  return t && t->is_string() ? t->get<std::string>() : "";
}

// A conversation's identity when the client names none (x-tierserve-conversation): its
// opening — the system prompt and the first user message of a chat, a completion's
// prompt — which every later turn of the same conversation repeats.
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

}  // namespace internal

void Gateway::completions(const HttpRequest& req, std::shared_ptr<Responder> out, bool chat) {
  auto x = std::make_shared<Exchange>();
  x->g = this;
  x->out = out;
  x->rec = out->access_record();
  x->chat = chat;
  x->path = chat ? "/v1/chat/completions" : "/v1/completions";
  x->arrived_ns = clock_.now_ns();
  x->request_id = x->rec ? x->rec->request_id : "";
  // Passed on only when valid (what the workers would log); anything else is dropped here.
  if (const std::string_view tp = req.header("traceparent"); !server::trace_id_of(tp).empty()) x->traceparent = std::string(tp);
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
  // The entitlement rule, as `serve` applies it; from here on the tier travels as its rank.
  x->tier_requested = cfg_.tier_index(requested);
  x->tier = x->tier_requested;
  if (key) {
    const sched::Move m = key->entitlement(x->tier_requested, tier_names_, cfg_.on_unentitled == server::OnUnentitled::kReject);
    if (m.kind == sched::Move::kReject) {
      out->respond(server::error_response(server::tier_not_entitled(requested)));
      return;
    }
    if (m.kind == sched::Move::kToTier) {
      x->tier = m.tier;
      x->degraded_reason = sched::reason_name(sched::Reason::kNotEntitled);
      registry_->counter(kDegradations, {requested, tier_names_[size_t(m.tier)], x->degraded_reason})->inc();
    }
  }
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
    in.tier = tier_names_[size_t(x->tier)];
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

}  // namespace ts::gateway
