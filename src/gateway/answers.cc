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

}  // namespace ts::gateway
