// POST /v1/chat/completions and /v1/completions: validate, resolve the tier against the
// key's entitlements, tokenize (HTTP thread), check the context and the key's limits, then
// submit to the serving layer. Every later event arrives through the callback on the
// engine-loop thread and goes out through the thread-safe Responder without blocking.
//
// Streams send their headers at admission (a proxy in front sees the response start at
// once), then a ": queued" comment at least every 10 s while the request waits (the
// serving layer's kWaiting updates), so that no idle timeout of a proxy cuts a queued
// stream. A request refused after its headers went out ends with an in-stream error event
// and [DONE]. A tier change while queued is said in-band (an SSE comment and the chunks'
// service_tier); the x-tierserve-* headers say what was known at admission.
#include <algorithm>
#include <chrono>
#include <random>

#include "server/access_log.h"
#include "server/api_error.h"
#include "server/app.h"
#include "server/openai_response.h"

namespace ts::server {
namespace {

// The HTTP status for a request the scheduler turned away or ended: global shedding is
// 503, a tier's own limits 429 (docs/architecture.md).
int status_for_reason(sched::Reason reason) {
  using R = sched::Reason;
  switch (reason) {
    case R::kOverloaded:
    case R::kShedForHigherTier:
    case R::kKvExhausted:
    case R::kCancelled:
    case R::kShutdown: return 503;
    case R::kQueueFull:
    case R::kPredictedWait:
    case R::kQueueTimeout: return 429;
    case R::kTooLarge:
    case R::kInvalidRequest: return 400;
    case R::kNotEntitled: return 403;
    case R::kNone:
    case R::kKvPressure:
    case R::kEngineError: return 500;
  }
  return 500;
}

// The reason as text, or `otherwise` for kNone.
std::string reason_text(sched::Reason r, const char* otherwise) {
  return r == sched::Reason::kNone ? otherwise : sched::reason_name(r);
}

ApiError error_for_update(const serving::Update& u) {
  const int status = status_for_reason(u.reason);
  ApiError e;
  e.status = status;
  e.type = status == 400 ? "invalid_request_error" : status == 429 ? "rate_limit_error" : "server_error";
  e.code = reason_text(u.reason, "error");
  e.message = u.message.empty() ? "request ended: " + e.code : u.message;
  if (status == 429 || status == 503) e.retry_after_ms = std::max<int64_t>(u.retry_after_ms, 1000);
  return e;
}

uint64_t random_seed() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

// The state of one accepted exchange, touched only by the engine-loop callbacks after
// submit (they come in order on one thread).
struct Exchange {
  const App* app = nullptr;
  AccessRecord* rec = nullptr;  // the access-log line's record (null: not logged)
  std::shared_ptr<Responder> out;
  ResponseHead head;
  ServedInfo served;
  bool stream = false;
  bool include_usage = false;
  Headers extra_headers;            // x-ratelimit-*, x-request-id
  KeyState* key = nullptr;
  int64_t max_tokens = 0;
  int64_t prompt_tokens = 0;
  std::string text;                 // non-streamed: the whole output
  bool want_logprobs = false;
  LogprobsInfo logprobs;            // non-streamed: all tokens; streamed: the next chunk's
  int64_t logprob_offset = 0;       // streamed completions: bytes of pieces sent so far
  bool started = false;             // stream headers sent
  bool first_chunk = true;          // no chunk sent yet (chat: the next carries the role)
  bool ended = false;
  std::vector<std::string> held;    // SSE comments before the stream started

  Headers headers() const {
    Headers h = extra_headers;
    h.emplace_back("x-tierserve-tier-requested", served.tier_requested);
    h.emplace_back("x-tierserve-tier-served", served.tier_served);
    if (served.tier_served != served.tier_requested && !served.degraded_reason.empty())
      h.emplace_back("x-tierserve-degraded-reason", served.degraded_reason);
    return h;
  }

  void start_stream() {
    if (started) return;
    started = true;
    HttpResponse r;
    r.content_type = "text/event-stream";
    r.headers = headers();
    r.headers.emplace_back("Cache-Control", "no-cache");
    r.headers.emplace_back("X-Accel-Buffering", "no");  // nginx and friends: pass the events through
    out->start_stream(std::move(r));
    for (auto& c : held) out->send(std::move(c));
    held.clear();
  }

  void comment(std::string text_line) {
    if (!stream) return;
    std::string c = sse_comment(text_line);
    if (started) out->send(std::move(c));
    else held.push_back(std::move(c));
  }

  void release(int64_t completion_tokens, bool refund_all) {
    if (!key) return;
    const int64_t unused = refund_all ? max_tokens + prompt_tokens : max_tokens - completion_tokens;
    key->release(unused);
    key = nullptr;
  }

  // What the access log says of this exchange, set before its response ends.
  void record(const UsageInfo* usage) {
    if (!rec) return;
    rec->tier_served = served.tier_served;
    rec->degraded_reason = served.degraded_reason;
    rec->prompt_tokens = prompt_tokens;
    if (usage) {
      rec->completion_tokens = usage->completion_tokens;
      rec->cached_tokens = usage->cached_prompt_tokens;
    }
    if (served.queue_ms > 0 || served.ttft_ms > 0) {
      rec->queue_ms = served.queue_ms;
      rec->ttft_ms = served.ttft_ms;
    }
    rec->preemptions = served.preemptions;
  }

  void fail(const ApiError& e) {
    if (ended) return;
    ended = true;
    record(nullptr);
    if (rec) rec->error_code = e.code;
    if (stream && started) {
      out->send(sse_data(e.to_json()));
      out->send(std::string(kSseDone));
      out->end();
      return;
    }
    HttpResponse r = error_response(e);
    for (auto& h : headers()) r.headers.push_back(h);
    out->respond(std::move(r));
  }

  void add_logprobs(const serving::Update& u) {
    if (!want_logprobs) return;
    for (const serving::TokenLogprob& t : u.logprobs) {
      TokenLogprobInfo i;
      i.token = t.token;
      i.logprob = t.logprob;
      for (const auto& a : t.top) i.top.emplace_back(a.token, a.logprob);
      logprobs.tokens.push_back(std::move(i));
    }
  }
  // The logprobs of the chunk about to be sent (then cleared), or null.
  const LogprobsInfo* stream_logprobs() {
    if (!want_logprobs || logprobs.tokens.empty()) return nullptr;
    chunk_logprobs = std::move(logprobs);
    logprobs = LogprobsInfo{};
    chunk_logprobs.text_offset = logprob_offset;
    for (const TokenLogprobInfo& t : chunk_logprobs.tokens) logprob_offset += int64_t(t.token.size());
    return &chunk_logprobs;
  }
  LogprobsInfo chunk_logprobs;

  void on_update(const serving::Update& u) {
    using K = serving::Update::Kind;
    switch (u.kind) {
      case K::kAdmitted:
        if (!u.accepted) {
          if (u.tier_served >= 0) served.tier_served = app->tier_name(u.tier_served);
          release(0, true);
          fail(error_for_update(u));
          return;
        }
        if (u.tier_served >= 0 && app->tier_name(u.tier_served) != served.tier_served) {
          served.tier_served = app->tier_name(u.tier_served);
          served.service_tier = app->openai_tier(served.tier_served);
          served.degraded_reason = reason_text(u.reason, "downgraded");
          comment("tierserve tier_changed from=" + app->tier_name(u.tier_requested) + " to=" + served.tier_served +
                  " reason=" + served.degraded_reason);
        }
        if (stream) start_stream();  // headers at admission
        return;
      case K::kWaiting:
        comment("queued");
        return;
      case K::kTierChanged: {
        const std::string from = served.tier_served;
        served.tier_served = app->tier_name(u.tier_served);
        served.service_tier = app->openai_tier(served.tier_served);
        // The reason explains a difference; a promotion back to (or within) the requested
        // tier leaves none.
        if (served.tier_served == served.tier_requested) served.degraded_reason.clear();
        else served.degraded_reason = reason_text(u.reason, "tier_changed");
        comment("tierserve tier_changed from=" + from + " to=" + served.tier_served + " reason=" +
                reason_text(u.reason, "none"));
        return;
      }
      case K::kPreempted:
        ++served.preemptions;
        comment("tierserve preempted tier=" + served.tier_served + " reason=" + reason_text(u.reason, "kv_pressure"));
        return;
      case K::kDelta:
        if (ended) return;
        add_logprobs(u);
        if (!stream) {
          text += u.text;
          return;
        }
        if (u.text.empty() && logprobs.tokens.empty()) return;
        start_stream();
        out->send(sse_data(chunk_json(head, u.text, first_chunk, "", served.service_tier, stream_logprobs(), include_usage)));
        first_chunk = false;
        return;
      case K::kDone: {
        served.queue_ms = double(u.timings.queue_ns) / 1e6;
        served.ttft_ms = double(u.timings.ttft_ns) / 1e6;
        served.preemptions = std::max(served.preemptions, u.timings.n_preemptions);
        served.steps_behind = u.timings.steps_behind;
        served.steps_behind_after_max_wait = u.timings.steps_behind_after_max_wait;
        UsageInfo usage{u.usage.prompt_tokens, u.usage.completion_tokens, u.usage.cached_prompt_tokens};
        release(u.usage.completion_tokens, false);
        if (ended) return;
        ended = true;
        record(&usage);
        const std::string finish = u.finish_reason.empty() ? "stop" : u.finish_reason;
        add_logprobs(u);
        if (!stream) {
          HttpResponse r;
          r.headers = headers();
          r.body = completion_body(head, text, finish, usage, served, want_logprobs ? &logprobs : nullptr);
          out->respond(std::move(r));
          return;
        }
        start_stream();
        out->send(sse_data(chunk_json(head, "", first_chunk, finish, served.service_tier, stream_logprobs(), include_usage)));
        first_chunk = false;
        if (include_usage) out->send(sse_data(usage_chunk_json(head, usage, served)));
        out->send(std::string(kSseDone));
        out->end();
        return;
      }
      case K::kFailed:
        release(u.usage.completion_tokens, u.usage.completion_tokens == 0);
        fail(error_for_update(u));
        return;
    }
  }
};

}  // namespace

void App::completions(const HttpRequest& req, std::shared_ptr<Responder> out, Endpoint ep) const {
  KeyState* key = keys_.enabled() ? keys_.authenticate(req.header("authorization")) : nullptr;
  if (draining()) {
    out->respond(error_response(server_error(503, "the server is shutting down", "draining")));
    return;
  }

  const int64_t max_seq_len = backend_.max_seq_len();
  RequestLimits lim;
  lim.max_tokens_cap = cfg_.limits.max_tokens_cap > 0 ? cfg_.limits.max_tokens_cap : max_seq_len;
  lim.max_stop_strings = cfg_.limits.max_stop_strings;
  lim.max_messages = cfg_.limits.max_messages;
  lim.max_json_depth = cfg_.limits.max_json_depth;
  lim.defaults = cfg_.model.sampling;
  CompletionRequest r;
  if (auto e = parse_completion_request(req.body, ep, lim, r)) {
    out->respond(error_response(*e));
    return;
  }

  AccessRecord* rec = out->access_record();
  if (!r.model.empty() && !serves_model(r.model)) {
    out->respond(error_response(model_not_found(r.model)));
    return;
  }
  const std::string model_name = r.model.empty() ? model_id() : r.model;
  if (rec) rec->model = model_name;

  // Tier: named by the request, else (absent or "auto") the key's default, else the server's.
  std::string requested;
  if (r.service_tier) {
    const std::optional<std::string> t = resolve_tier(*r.service_tier);
    if (!t) {
      std::string known = "auto, fast, scale";
      for (const auto& tc : cfg_.sched.tiers) known += ", " + tc.name;
      for (const auto& [a, tn] : cfg_.tier_aliases) known += ", " + a;
      out->respond(error_response(bad_request("unknown service_tier '" + *r.service_tier + "' (known: " + known + ")",
                                              "service_tier", "invalid_value")));
      return;
    }
    requested = *t;
  }
  // A body priority (the Inference Extension's convention) when service_tier names none.
  if (requested.empty() && r.priority) {
    if (cfg_.request_priorities.empty()) {
      out->respond(error_response(bad_request("'priority' is not mapped to tiers on this server (request_priorities is "
                                              "empty); name a service_tier instead",
                                              "priority", "unsupported_parameter")));
      return;
    }
    requested = tier_for_priority(cfg_.request_priorities, *r.priority);
  }
  if (requested.empty())
    requested = key && !key->config().default_tier.empty() ? key->config().default_tier : cfg_.default_tier;
  if (rec) rec->tier_requested = requested;
  // The entitlement rule; from here on the tier travels as its rank.
  const sched::TierId requested_rank = tier_index(requested);
  sched::TierId tier_rank = requested_rank;
  std::string entitlement_reason;
  if (key) {
    const sched::Move m = key->entitlement(requested_rank, tier_names_, cfg_.on_unentitled == OnUnentitled::kReject);
    if (m.kind == sched::Move::kReject) {
      out->respond(error_response(tier_not_entitled(requested)));
      return;
    }
    if (m.kind == sched::Move::kToTier) {
      tier_rank = m.tier;
      entitlement_reason = sched::reason_name(sched::Reason::kNotEntitled);
      count_degradation(requested, tier_name(tier_rank), entitlement_reason);
    }
  }
  const std::string tier = tier_name(tier_rank);

  // Tokenize here, on the HTTP thread (the engine loop only decodes).
  std::vector<int32_t> prompt;
  if (ep == Endpoint::kChat) {
    auto t = backend_.tokenize_chat(with_system_prompt(r.messages));
    if (!t.is_ok()) {
      out->respond(error_response(bad_request(t.status().message(), "messages", "invalid_value")));
      return;
    }
    prompt = std::move(*t);
  } else if (!r.prompt_tokens.empty()) {
    prompt = r.prompt_tokens;
    const auto bad = std::find_if(prompt.begin(), prompt.end(), [&](int32_t t) { return t >= backend_.n_vocab(); });
    if (bad != prompt.end()) {
      out->respond(error_response(bad_request("'prompt' has token id " + std::to_string(*bad) + ", past the vocabulary of " +
                                                  std::to_string(backend_.n_vocab()) + " tokens",
                                              "prompt", "invalid_value")));
      return;
    }
  } else {
    prompt = backend_.tokenize_prompt(r.prompt);
  }
  for (const auto& [t, b] : r.logit_bias) {
    if (t >= backend_.n_vocab()) {
      out->respond(error_response(bad_request("'logit_bias' names token " + std::to_string(t) +
                                                  ", past the vocabulary of " + std::to_string(backend_.n_vocab()) +
                                                  " tokens",
                                              "logit_bias", "invalid_value")));
      return;
    }
  }
  if (prompt.empty()) {
    out->respond(error_response(bad_request("the prompt has no tokens", ep == Endpoint::kChat ? "messages" : "prompt", "invalid_value")));
    return;
  }
  const int64_t n_prompt = int64_t(prompt.size());
  if (n_prompt >= max_seq_len) {
    out->respond(error_response(bad_request(
        "This model's maximum context length is " + std::to_string(max_seq_len) + " tokens. However, your prompt has " +
            std::to_string(n_prompt) + " tokens, which leaves no room for the completion.",
        ep == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded")));
    return;
  }
  // An explicit max_tokens beyond the context is clipped (finish_reason "length").
  const int64_t max_tokens = std::min(r.max_tokens.value_or(cfg_.limits.default_max_tokens), max_seq_len - n_prompt);

  auto ex = std::make_shared<Exchange>();
  ex->out = out;
  ex->head.endpoint = ep;
  ex->head.id = make_response_id(ep);
  ex->head.created = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
  ex->head.model = model_name;
  ex->app = this;
  ex->rec = rec;
  ex->served.tier_requested = requested;
  ex->served.tier_served = tier;
  ex->served.service_tier = openai_tier(tier);
  ex->served.degraded_reason = entitlement_reason;
  ex->stream = r.stream;
  ex->include_usage = r.include_usage;
  ex->max_tokens = max_tokens;
  ex->prompt_tokens = n_prompt;

  if (key) {
    const Admission a = key->admit(n_prompt + max_tokens);
    const KeyConfig& kc = key->config();
    if (kc.requests_per_min > 0) {
      ex->extra_headers.emplace_back("x-ratelimit-limit-requests", std::to_string(a.info.limit_requests));
      ex->extra_headers.emplace_back("x-ratelimit-remaining-requests", std::to_string(a.info.remaining_requests));
      ex->extra_headers.emplace_back("x-ratelimit-reset-requests", format_reset(a.info.reset_requests_ms));
    }
    if (kc.tokens_per_min > 0) {
      ex->extra_headers.emplace_back("x-ratelimit-limit-tokens", std::to_string(a.info.limit_tokens));
      ex->extra_headers.emplace_back("x-ratelimit-remaining-tokens", std::to_string(a.info.remaining_tokens));
      ex->extra_headers.emplace_back("x-ratelimit-reset-tokens", format_reset(a.info.reset_tokens_ms));
    }
    if (a.verdict != LimitVerdict::kOk) {
      count_rejection(tier);
      ApiError e = server_error(429, a.message,
                                a.verdict == LimitVerdict::kConcurrent ? "concurrency_limit_exceeded" : "rate_limit_exceeded");
      e.retry_after_ms = std::max<int64_t>(a.retry_after_ms, 1);
      HttpResponse resp = error_response(e);
      for (auto& h : ex->headers()) resp.headers.push_back(h);
      out->respond(std::move(resp));
      return;
    }
    ex->key = key;
  }

  serving::GenerateRequest g;
  g.tier = tier_rank;
  g.prompt = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling.temperature = float(r.temperature);
  g.sampling.top_p = float(r.top_p);
  g.sampling.top_k = r.top_k;
  g.sampling.min_p = float(r.min_p);
  g.sampling.frequency_penalty = float(r.frequency_penalty);
  g.sampling.presence_penalty = float(r.presence_penalty);
  g.sampling.repeat_penalty = float(r.repetition_penalty);
  g.sampling.seed = r.seed ? uint64_t(*r.seed) : random_seed();
  g.sampling.logit_bias = r.logit_bias;
  g.stop = r.stop;
  g.ignore_eos = r.ignore_eos;
  g.logprobs = r.logprobs;
  ex->want_logprobs = r.logprobs >= 0;
  if (key) g.isolation_key = std::stoull(key->config().sha256.substr(0, 16), nullptr, 16);

  auto submitted = backend_.submit(std::move(g), [ex](const serving::Update& u) { ex->on_update(u); });
  if (!submitted.is_ok()) {
    // Nothing was queued: no callback will come, so answer and release here.
    ex->release(0, true);
    const Status& st = submitted.status();
    ApiError e;
    if (st.code() == StatusCode::kUnavailable) {
      e = server_error(503, st.message(), "draining");
      e.retry_after_ms = 5000;
    } else if (st.code() == StatusCode::kOutOfRange) {
      e = bad_request(st.message(), ep == Endpoint::kChat ? "messages" : "prompt", "context_length_exceeded");
    } else if (st.code() == StatusCode::kInvalidArgument) {
      e = bad_request(st.message(), "", "invalid_value");
    } else {
      e = server_error(500, st.message(), "internal_error");
    }
    ex->ended = true;
    HttpResponse resp = error_response(e);
    for (auto& h : ex->headers()) resp.headers.push_back(h);
    out->respond(std::move(resp));
    return;
  }
  // A client that goes away cancels its request (the service ends it within one step).
  const serving::RequestId id = *submitted;
  Backend* backend = &backend_;
  out->on_disconnect([backend, id] { backend->cancel(id); });
}

}  // namespace ts::server
