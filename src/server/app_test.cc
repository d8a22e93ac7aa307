// Routes and handlers without sockets: a scripted Backend that records submissions and lets
// the test play the engine loop's updates, and a Responder that records what was sent.
#include "server/access_log.h"
#include "server/app.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "metrics/tierserve_metrics.h"
#include "server/sha256.h"

namespace ts::sched {
// gtest messages print a reason by its name.
std::ostream& operator<<(std::ostream& os, Reason r) { return os << reason_name(r); }
}  // namespace ts::sched

namespace ts::server {
namespace {

using json = nlohmann::json;
using K = serving::Update::Kind;

// The default tiers by rank, as serving numbers them (priority order).
sched::TierId rank_of(const std::string& name) {
  return name == "ultrafast" ? 0 : name == "standard" ? 1 : name == "batch" ? 2 : 99;
}

class FakeBackend : public Backend {
 public:
  Result<serving::RequestId> submit(serving::GenerateRequest req, serving::Callback cb) override {
    if (refuse) return *refuse;
    reqs.push_back(std::move(req));
    cbs.push_back(std::move(cb));
    return serving::RequestId(reqs.size());
  }
  void cancel(serving::RequestId id) override { cancelled.push_back(id); }
  // One token per byte: lengths are easy to reason about.
  std::vector<int32_t> tokenize_prompt(const std::string& text) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  Result<std::vector<int32_t>> tokenize_chat(std::span<const tok::ChatMessage> m, bool gen) const override {
    std::string s;
    for (const auto& x : m) s += x.role + ": " + x.content + "\n";
    if (gen) s += "assistant: ";
    return std::vector<int32_t>(s.begin(), s.end());
  }
  std::string detokenize(std::span<const int32_t> ids) const override { return std::string(ids.begin(), ids.end()); }
  int64_t max_seq_len() const override { return seq_len; }
  int32_t n_vocab() const override { return 256; }
  serving::Stats stats() const override { return stats_; }
  serving::Stats stats_;

  void play(size_t i, serving::Update u) {
    u.id = i + 1;
    cbs[i](u);
  }
  void admit(size_t i, const std::string& tier) {
    serving::Update u;
    u.kind = K::kAdmitted;
    u.accepted = true;
    u.tier_requested = reqs[i].tier;
    u.tier_served = rank_of(tier);
    play(i, u);
  }
  void delta(size_t i, const std::string& text) {
    serving::Update u;
    u.kind = K::kDelta;
    u.text = text;
    u.n_tokens = 1;
    play(i, u);
  }
  void done(size_t i, int64_t prompt, int64_t completion) {
    serving::Update u;
    u.kind = K::kDone;
    u.finish_reason = "length";
    u.usage.prompt_tokens = prompt;
    u.usage.completion_tokens = completion;
    u.timings.queue_ns = 2000000;
    u.timings.ttft_ns = 5000000;
    play(i, u);
  }

  std::optional<Status> refuse;
  int64_t seq_len = 64;
  std::vector<serving::GenerateRequest> reqs;
  std::vector<serving::Callback> cbs;
  std::vector<serving::RequestId> cancelled;
};

class Recorder : public Responder {
 public:
  void respond(HttpResponse r) override {
    ++n_responses;
    resp = std::move(r);
  }
  void start_stream(HttpResponse h) override {
    ++n_responses;
    resp = std::move(h);
    streaming = true;
  }
  void send(std::string d) override { stream += d; }
  void end() override { ended = true; }
  void on_disconnect(std::function<void()> fn) override { disconnect = std::move(fn); }

  std::string header(const std::string& name) const {
    for (const auto& [k, v] : resp.headers)  // HTTP header names are case-insensitive
      if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
          }))
        return v;
    return "";
  }
  json body() const { return json::parse(resp.body); }

  int n_responses = 0;
  HttpResponse resp;
  bool streaming = false, ended = false;
  std::string stream;
  std::function<void()> disconnect;
};

HttpRequest post(const std::string& path, const std::string& body, const std::string& key = "") {
  HttpRequest r;
  r.method = "POST";
  r.path = path;
  r.body = body;
  if (!key.empty()) r.headers.emplace_back("authorization", "Bearer " + key);
  return r;
}

HttpRequest get(const std::string& path, const std::string& key = "") {
  HttpRequest r = post(path, "", key);
  r.method = "GET";
  return r;
}

struct AppTest : ::testing::Test {
  void make(ServerConfig c = {}) {
    cfg = std::move(c);
    app = std::make_unique<App>(cfg, backend, registry.get(), clock, "test-model");
  }
  std::shared_ptr<Recorder> call(const HttpRequest& r, Listener l = Listener::kMain) {
    auto rec = std::make_shared<Recorder>();
    app->handle(r, rec, l);
    return rec;
  }
  ServerConfig cfg;
  FakeBackend backend;
  std::unique_ptr<metrics::Registry> registry = metrics::make_tierserve_registry();
  ManualClock clock;
  std::unique_ptr<App> app;
};

// model.system_prompt goes in front of chat requests without a system message (and only
// those); model.sampling fills the sampling fields a request leaves out, and only those.
TEST_F(AppTest, OperatorSystemPromptAndSamplingDefaults) {
  ServerConfig c;
  c.model.system_prompt = "Be brief.";
  c.model.sampling.temperature = 0.2;
  c.model.sampling.top_p = 0.9;
  c.model.sampling.top_k = 20;
  make(c);
  call(post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})"));
  call(post("/v1/chat/completions",
            R"({"messages":[{"role":"system","content":"Mine."},{"role":"user","content":"hi"}],"max_tokens":2,"temperature":1.5,"top_k":0})"));
  ASSERT_EQ(backend.reqs.size(), 2u);
  const std::string p0(backend.reqs[0].prompt.begin(), backend.reqs[0].prompt.end());
  const std::string p1(backend.reqs[1].prompt.begin(), backend.reqs[1].prompt.end());
  EXPECT_EQ(p0, "system: Be brief.\nuser: hi\nassistant: ");
  EXPECT_EQ(p1, "system: Mine.\nuser: hi\nassistant: ");
  EXPECT_FLOAT_EQ(backend.reqs[0].sampling.temperature, 0.2f);
  EXPECT_FLOAT_EQ(backend.reqs[0].sampling.top_p, 0.9f);
  EXPECT_EQ(backend.reqs[0].sampling.top_k, 20);
  EXPECT_FLOAT_EQ(backend.reqs[1].sampling.temperature, 1.5f);  // the request's own values win
  EXPECT_FLOAT_EQ(backend.reqs[1].sampling.top_p, 0.9f);
  EXPECT_EQ(backend.reqs[1].sampling.top_k, 0);
  // /tokenize renders the chat the same way.
  auto t = call(post("/tokenize", R"({"messages":[{"role":"user","content":"hi"}]})"));
  EXPECT_EQ(t->resp.status, 200) << t->resp.body;
  EXPECT_EQ(t->body()["count"].get<int64_t>(), int64_t(p0.size())) << t->resp.body;
}

TEST_F(AppTest, CompletionNonStreamed) {
  make();
  auto rec = call(post("/v1/completions", R"({"prompt":"abcd","max_tokens":5,"temperature":0,"seed":3,"stop":"x"})"));
  ASSERT_EQ(backend.reqs.size(), 1u);
  EXPECT_EQ(rec->n_responses, 0);  // nothing until the request ends
  const auto& g = backend.reqs[0];
  EXPECT_EQ(g.tier, rank_of("standard"));
  EXPECT_EQ(g.prompt.size(), 4u);
  EXPECT_EQ(g.max_tokens, 5);
  EXPECT_EQ(g.sampling.temperature, 0.0f);
  EXPECT_EQ(g.sampling.seed, 3u);
  EXPECT_EQ(g.stop, std::vector<std::string>{"x"});
  backend.admit(0, "standard");
  backend.delta(0, "Hel");
  backend.delta(0, "lo");
  backend.done(0, 4, 2);
  ASSERT_EQ(rec->n_responses, 1);
  EXPECT_EQ(rec->resp.status, 200);
  const json b = rec->body();
  EXPECT_EQ(b["object"], "text_completion");
  EXPECT_EQ(b["model"], "test-model");
  EXPECT_EQ(b["choices"][0]["text"], "Hello");
  EXPECT_EQ(b["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(b["usage"]["total_tokens"], 6);
  EXPECT_EQ(b["service_tier"], "default");
  EXPECT_DOUBLE_EQ(b["tierserve"]["ttft_ms"].get<double>(), 5.0);
  EXPECT_EQ(rec->header("x-tierserve-tier-requested"), "standard");
  EXPECT_EQ(rec->header("x-tierserve-tier-served"), "standard");
  EXPECT_EQ(rec->header("x-tierserve-degraded-reason"), "");
  // Disconnect after the end still only asks for a cancel (harmless); before, it must.
  ASSERT_TRUE(rec->disconnect);
}

TEST_F(AppTest, ChatStreamWithUsageAndInBandTierChange) {
  make();
  auto rec = call(post("/v1/chat/completions",
                       R"({"messages":[{"role":"user","content":"hi"}],"stream":true,
                           "stream_options":{"include_usage":true},"service_tier":"priority"})"));
  ASSERT_EQ(backend.reqs.size(), 1u);
  EXPECT_EQ(backend.reqs[0].tier, rank_of("ultrafast"));
  EXPECT_EQ(backend.reqs[0].max_tokens, 64 - 20);  // default 256 clipped to the context ("user: hi\nassistant: ")
  EXPECT_FALSE(rec->streaming);
  backend.admit(0, "ultrafast");
  // Headers at admission: they say what was known then; later changes are said in-band.
  ASSERT_TRUE(rec->streaming);
  EXPECT_EQ(rec->resp.content_type, "text/event-stream");
  EXPECT_EQ(rec->header("x-accel-buffering"), "no");
  EXPECT_EQ(rec->header("x-tierserve-tier-requested"), "ultrafast");
  EXPECT_EQ(rec->header("x-tierserve-tier-served"), "ultrafast");
  EXPECT_EQ(rec->header("x-tierserve-degraded-reason"), "");
  serving::Update tc;
  tc.kind = K::kTierChanged;
  tc.tier_requested = rank_of("ultrafast");
  tc.tier_served = rank_of("standard");
  tc.reason = sched::Reason::kQueueTimeout;
  backend.play(0, tc);
  backend.delta(0, "A");
  serving::Update pre;
  pre.kind = K::kPreempted;
  pre.reason = sched::Reason::kKvPressure;
  backend.play(0, pre);
  backend.delta(0, "B");
  backend.done(0, 10, 2);
  EXPECT_TRUE(rec->ended);
  // Frame by frame.
  std::vector<std::string> events;
  for (size_t p = 0; p < rec->stream.size();) {
    const size_t e = rec->stream.find("\n\n", p);
    ASSERT_NE(e, std::string::npos) << "unterminated event in: " << rec->stream;
    events.push_back(rec->stream.substr(p, e - p));
    p = e + 2;
  }
  ASSERT_EQ(events.size(), 7u) << rec->stream;
  EXPECT_EQ(events[0], ": tierserve tier_changed from=ultrafast to=standard reason=queue_timeout");
  const json c1 = json::parse(events[1].substr(6));
  EXPECT_EQ(c1["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(c1["choices"][0]["delta"]["content"], "A");
  EXPECT_EQ(c1["service_tier"], "default");
  EXPECT_EQ(events[2], ": tierserve preempted tier=standard reason=kv_pressure");
  EXPECT_EQ(json::parse(events[3].substr(6))["choices"][0]["delta"]["content"], "B");
  EXPECT_EQ(json::parse(events[4].substr(6))["choices"][0]["finish_reason"], "length");
  const json usage = json::parse(events[5].substr(6));
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(usage["tierserve"]["preemptions"], 1);
  EXPECT_EQ(events[6], "data: [DONE]");
}

TEST_F(AppTest, PromotionWithinTheTierIsNoDegradation) {
  make();
  auto rec = call(post("/v1/completions", R"({"prompt":"a","service_tier":"ultrafast"})"));
  backend.admit(0, "ultrafast");
  serving::Update tc;
  tc.kind = K::kTierChanged;
  tc.tier_requested = tc.tier_served = rank_of("ultrafast");  // promoted to the head of its line
  tc.reason = sched::Reason::kQueueTimeout;
  backend.play(0, tc);
  backend.done(0, 1, 0);
  EXPECT_EQ(rec->header("x-tierserve-tier-served"), "ultrafast");
  EXPECT_EQ(rec->header("x-tierserve-degraded-reason"), "");
  EXPECT_TRUE(rec->body()["tierserve"]["degraded_reason"].is_null());
}

TEST_F(AppTest, SchedulerRejectionsMapTo429And503WithRetryAfter) {
  make();
  using R = sched::Reason;
  for (auto [reason, status] : {std::pair{R::kQueueFull, 429}, {R::kPredictedWait, 429}, {R::kOverloaded, 503},
                                {R::kShedForHigherTier, 503}}) {
    auto rec = call(post("/v1/completions", R"({"prompt":"a","stream":true})"));
    serving::Update u;
    u.kind = K::kAdmitted;
    u.accepted = false;
    u.tier_requested = u.tier_served = rank_of("standard");
    u.reason = reason;
    u.message = "no room";
    u.retry_after_ms = 2500;
    backend.play(backend.reqs.size() - 1, u);
    EXPECT_EQ(rec->resp.status, status) << reason;
    EXPECT_FALSE(rec->streaming);
    EXPECT_EQ(rec->header("Retry-After"), "3") << reason;
    EXPECT_EQ(rec->body()["error"]["code"], sched::reason_name(reason));
  }
}

TEST_F(AppTest, FailureMidStreamIsAnErrorEvent) {
  make();
  auto rec = call(post("/v1/completions", R"({"prompt":"a","stream":true})"));
  backend.admit(0, "standard");
  backend.delta(0, "x");
  serving::Update f;
  f.kind = K::kFailed;
  f.reason = sched::Reason::kCancelled;
  f.message = "server shutting down";
  backend.play(0, f);
  EXPECT_TRUE(rec->ended);
  EXPECT_NE(rec->stream.find("data: {\"error\":{\"code\":\"cancelled\""), std::string::npos) << rec->stream;
  EXPECT_NE(rec->stream.find("data: [DONE]"), std::string::npos);
}

// A stream's headers go out at admission; while it waits it hears ": queued"; refused in
// the queue after that (its max wait passed), it ends with an error event and [DONE].
TEST_F(AppTest, RefusalWhileQueuedAfterTheHeadersIsAnErrorEvent) {
  make();
  auto rec = call(post("/v1/completions", R"({"prompt":"a","stream":true})"));
  backend.admit(0, "standard");
  EXPECT_TRUE(rec->streaming);
  EXPECT_EQ(rec->resp.status, 200);
  serving::Update w;
  w.kind = K::kWaiting;
  w.accepted = true;
  w.tier_requested = w.tier_served = rank_of("standard");
  backend.play(0, w);
  EXPECT_NE(rec->stream.find(": queued"), std::string::npos) << rec->stream;
  EXPECT_FALSE(rec->ended);
  serving::Update f;
  f.kind = K::kFailed;
  f.reason = sched::Reason::kQueueTimeout;
  f.message = "waited past max_queue_wait_ms";
  backend.play(0, f);
  EXPECT_TRUE(rec->ended);
  EXPECT_NE(rec->stream.find("data: {\"error\":{\"code\":\"queue_timeout\""), std::string::npos) << rec->stream;
  EXPECT_NE(rec->stream.find("data: [DONE]"), std::string::npos);
  EXPECT_EQ(rec->stream.find("\"text\""), std::string::npos) << "no token was sent: " << rec->stream;
}

TEST_F(AppTest, BadInputIs400BeforeQueueing) {
  make();
  auto r1 = call(post("/v1/completions", std::string(70, 'a').insert(0, "{\"prompt\":\"") + "\"}"));
  EXPECT_EQ(r1->resp.status, 400);
  EXPECT_EQ(r1->body()["error"]["code"], "context_length_exceeded");
  auto r2 = call(post("/v1/completions", R"({"prompt":"a","service_tier":"gold"})"));
  EXPECT_EQ(r2->resp.status, 400);
  EXPECT_EQ(r2->body()["error"]["param"], "service_tier");
  auto r3 = call(post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"a"}],"n":2})"));
  EXPECT_EQ(r3->resp.status, 400);
  auto r4 = call(post("/v1/completions", R"({"prompt":"a","max_tokens":65})"));  // cap = context
  EXPECT_EQ(r4->resp.status, 400);
  EXPECT_TRUE(backend.reqs.empty());
  // An explicit max_tokens within the cap but beyond the room left is clipped.
  call(post("/v1/completions", R"({"prompt":"abcd","max_tokens":64})"));
  ASSERT_EQ(backend.reqs.size(), 1u);
  EXPECT_EQ(backend.reqs[0].max_tokens, 60);
}

TEST_F(AppTest, SubmitErrorsAreMapped) {
  make();
  backend.refuse = unavailable("draining");
  auto r = call(post("/v1/completions", R"({"prompt":"a"})"));
  EXPECT_EQ(r->resp.status, 503);
  EXPECT_EQ(r->header("Retry-After"), "5");
  backend.refuse = out_of_range("too long");
  EXPECT_EQ(call(post("/v1/completions", R"({"prompt":"a"})"))->body()["error"]["code"], "context_length_exceeded");
}

TEST_F(AppTest, DisconnectCancels) {
  make();
  auto rec = call(post("/v1/completions", R"({"prompt":"a","stream":true})"));
  ASSERT_TRUE(rec->disconnect);
  rec->disconnect();
  EXPECT_EQ(backend.cancelled, std::vector<serving::RequestId>{1});
}

TEST_F(AppTest, DrainingRefusesNewWorkAndIsNotReady) {
  make();
  EXPECT_EQ(call(get("/health/ready"))->resp.status, 200);
  app->begin_drain();
  EXPECT_EQ(call(get("/health/ready"))->resp.status, 503);
  EXPECT_EQ(call(get("/health/live"))->resp.status, 200);
  auto r = call(post("/v1/completions", R"({"prompt":"a"})"));
  EXPECT_EQ(r->resp.status, 503);
  EXPECT_EQ(r->body()["error"]["code"], "draining");
  EXPECT_FALSE(r->header("Retry-After").empty());
}

TEST_F(AppTest, RoutesModelsMetricsAnd404And405) {
  make();
  auto m = call(get("/v1/models"));
  EXPECT_EQ(m->resp.status, 200);
  EXPECT_EQ(m->body()["data"][0]["id"], "test-model");
  auto p = call(get("/metrics"));
  EXPECT_EQ(p->resp.status, 200);
  EXPECT_NE(p->resp.body.find("# TYPE tierserve_requests_total counter"), std::string::npos);
  EXPECT_EQ(call(get("/nope"))->resp.status, 404);
  auto w = call(get("/v1/completions"));
  EXPECT_EQ(w->resp.status, 405);
  EXPECT_EQ(w->header("Allow"), "POST");
  EXPECT_EQ(w->body()["error"]["code"], "method_not_allowed");
}

// The gauges gateways and autoscalers route on, in a scrape: golden text.
TEST_F(AppTest, GatewayGaugesGoldenText) {
  backend.stats_.n_active = 5;
  backend.stats_.n_running = 2;
  backend.stats_.kv.block_size = 16;
  backend.stats_.kv.total = 100;
  backend.stats_.kv.used = 25;
  make();
  const std::string text = call(get("/metrics"))->resp.body;
  auto block = [&](const std::string& name) {
    const size_t at = text.find("# HELP " + name + " ");
    if (at == std::string::npos) return std::string("(missing " + name + ")");
    size_t end = text.find("# HELP ", at + 1);
    return text.substr(at, end == std::string::npos ? std::string::npos : end - at);
  };
  EXPECT_EQ(block("tierserve_num_requests_waiting"),
            "# HELP tierserve_num_requests_waiting Requests accepted and not running yet (all tiers).\n"
            "# TYPE tierserve_num_requests_waiting gauge\ntierserve_num_requests_waiting 3\n");
  EXPECT_EQ(block("tierserve_num_requests_running"),
            "# HELP tierserve_num_requests_running Requests holding KV cache (all tiers).\n"
            "# TYPE tierserve_num_requests_running gauge\ntierserve_num_requests_running 2\n");
  EXPECT_EQ(block("tierserve_kv_cache_usage_ratio"),
            "# HELP tierserve_kv_cache_usage_ratio Fraction of the KV cache's blocks held by requests (0..1; cached "
            "prefixes not counted).\n# TYPE tierserve_kv_cache_usage_ratio gauge\ntierserve_kv_cache_usage_ratio 0.25\n");
  EXPECT_EQ(block("tierserve_cache_config_info"),
            "# HELP tierserve_cache_config_info The KV cache's configuration (value 1).\n"
            "# TYPE tierserve_cache_config_info gauge\ntierserve_cache_config_info{block_size=\"16\",num_blocks=\"100\"} 1\n");
  EXPECT_NE(text.find("tierserve_build_info{version=\""), std::string::npos);
  EXPECT_NE(text.find("\nprocess_resident_memory_bytes "), std::string::npos);
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
  EXPECT_NE(text.find("\nprocess_open_fds "), std::string::npos);
  EXPECT_EQ(text.find("vllm:"), std::string::npos);  // off by default
  ServerConfig c;
  c.metrics.vllm_names = true;
  make(c);
  const std::string v = call(get("/metrics"))->resp.body;
  EXPECT_NE(v.find("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"test-model\"} 3\n"),
            std::string::npos)
      << v;
  EXPECT_NE(v.find("\nvllm:num_requests_running{model_name=\"test-model\"} 2\n"), std::string::npos);
  EXPECT_NE(v.find("\nvllm:kv_cache_usage_perc{model_name=\"test-model\"} 0.25\n"), std::string::npos);
  EXPECT_NE(v.find("\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\"} 1\n"), std::string::npos);
}

// service_tier as OpenAI defines it: the values it accepts, "auto" and none as the default
// tier, and the OpenAI value of the serving tier in the response.
TEST_F(AppTest, ServiceTierValuesInAndOut) {
  make();
  EXPECT_EQ(*app->resolve_tier("priority"), "ultrafast");
  EXPECT_EQ(*app->resolve_tier("fast"), "ultrafast");
  EXPECT_EQ(*app->resolve_tier("default"), "standard");
  EXPECT_EQ(*app->resolve_tier("scale"), "standard");
  EXPECT_EQ(*app->resolve_tier("flex"), "batch");
  EXPECT_EQ(*app->resolve_tier("auto"), "");
  EXPECT_EQ(*app->resolve_tier("batch"), "batch");
  EXPECT_FALSE(app->resolve_tier("gold").has_value());
  EXPECT_EQ(app->openai_tier("ultrafast"), "priority");
  EXPECT_EQ(app->openai_tier("standard"), "default");
  EXPECT_EQ(app->openai_tier("batch"), "flex");
  auto rec = call(post("/v1/completions", R"({"prompt":"a","service_tier":"auto","max_tokens":2})"));
  ASSERT_EQ(backend.reqs.size(), 1u);
  EXPECT_EQ(backend.reqs[0].tier, rank_of("standard"));
  backend.admit(0, "batch");  // downgraded while queued
  backend.done(0, 1, 2);
  EXPECT_EQ(rec->body()["service_tier"], "flex");
  EXPECT_EQ(rec->body()["tierserve"]["tier_served"], "batch");
  // A tier without an OpenAI value is a config error.
  ServerConfig c;
  c.tier_aliases.erase("flex");
  EXPECT_NE(validate(c).message().find("tier 'batch' has no OpenAI service_tier"), std::string::npos) << validate(c).message();
  c = ServerConfig{};
  c.tier_aliases["auto"] = "standard";
  EXPECT_NE(validate(c).message().find("tier_aliases.auto"), std::string::npos);
}

// A body priority (the Inference Extension's convention: higher = more urgent) picks the
// tier when service_tier names none: the tier with the highest threshold at or below it.
TEST_F(AppTest, BodyPriorityMapsToTiers) {
  make();
  const std::pair<const char*, const char*> cases[] = {
      {"1000", "ultrafast"}, {"100", "ultrafast"}, {"99", "standard"}, {"0", "standard"}, {"-1", "batch"},
      {"-10", "batch"},      {"-2147483648", "batch"}, {"100.0", "ultrafast"}};
  for (const auto& [p, tier] : cases) {
    backend.reqs.clear();
    call(post("/v1/completions", std::string(R"({"prompt":"a","max_tokens":2,"priority":)") + p + "}"));
    ASSERT_EQ(backend.reqs.size(), 1u) << p;
    EXPECT_EQ(backend.reqs[0].tier, rank_of(tier)) << p;
  }
  // service_tier wins; "auto" leaves it to the priority.
  backend.reqs.clear();
  call(post("/v1/completions", R"({"prompt":"a","max_tokens":2,"priority":100,"service_tier":"flex"})"));
  call(post("/v1/completions", R"({"prompt":"a","max_tokens":2,"priority":100,"service_tier":"auto"})"));
  ASSERT_EQ(backend.reqs.size(), 2u);
  EXPECT_EQ(backend.reqs[0].tier, rank_of("batch"));
  EXPECT_EQ(backend.reqs[1].tier, rank_of("ultrafast"));
  // Not an int32: a typed 400, nothing queued.
  backend.reqs.clear();
  for (const char* p : {R"("high")", "1.5", "2147483648", "true", "[1]"}) {
    auto rec = call(post("/v1/completions", std::string(R"({"prompt":"a","priority":)") + p + "}"));
    EXPECT_EQ(rec->resp.status, 400) << p;
    EXPECT_EQ(rec->body()["error"]["param"], "priority") << p;
  }
  EXPECT_TRUE(backend.reqs.empty());
  // Unmapped on this server: told so.
  ServerConfig c;
  c.request_priorities.clear();
  make(c);
  auto rec = call(post("/v1/completions", R"({"prompt":"a","priority":5})"));
  EXPECT_EQ(rec->resp.status, 400);
  EXPECT_EQ(rec->body()["error"]["code"], "unsupported_parameter");
  // Thresholds name configured tiers, once each.
  c = ServerConfig{};
  c.request_priorities["gold"] = 7;
  EXPECT_NE(validate(c).message().find("request_priorities.gold"), std::string::npos) << validate(c).message();
  c = ServerConfig{};
  c.request_priorities["batch"] = 0;
  EXPECT_NE(validate(c).message().find("given to two tiers"), std::string::npos) << validate(c).message();
}

TEST_F(AppTest, ModelNamesAnd404) {
  ServerConfig c;
  c.model.served_names = {"alpha", "beta"};
  make(c);
  auto m = call(get("/v1/models"));
  ASSERT_EQ(m->body()["data"].size(), 2u);
  EXPECT_EQ(m->body()["data"][1]["id"], "beta");
  EXPECT_EQ(call(get("/v1/models/beta"))->body()["id"], "beta");
  auto nf = call(get("/v1/models/gamma"));
  EXPECT_EQ(nf->resp.status, 404);
  EXPECT_EQ(nf->body()["error"]["code"], "model_not_found");
  auto bad = call(post("/v1/chat/completions", R"({"model":"gamma","messages":[{"role":"user","content":"x"}]})"));
  EXPECT_EQ(bad->resp.status, 404);
  EXPECT_EQ(bad->body()["error"]["param"], "model");
  EXPECT_TRUE(backend.reqs.empty());
  auto ok = call(post("/v1/completions", R"({"model":"beta","prompt":"a","max_tokens":1})"));
  ASSERT_EQ(backend.reqs.size(), 1u);
  backend.admit(0, "standard");
  backend.done(0, 1, 1);
  EXPECT_EQ(ok->body()["model"], "beta");
  auto none = call(post("/v1/completions", R"({"prompt":"a","max_tokens":1})"));
  backend.admit(1, "standard");
  backend.done(1, 1, 1);
  EXPECT_EQ(none->body()["model"], "alpha");  // the primary name
}

TEST_F(AppTest, TokenizeDetokenizeAndHealth) {
  make();
  auto t = call(post("/tokenize", R"({"prompt":"abc"})"));
  EXPECT_EQ(t->body()["tokens"], json::array({97, 98, 99}));
  EXPECT_EQ(t->body()["count"], 3);
  EXPECT_TRUE(t->body()["token_strs"].is_null());
  auto ts = call(post("/tokenize", R"({"prompt":"ab","return_token_strs":true})"));
  EXPECT_EQ(ts->body()["token_strs"], json::array({"a", "b"}));
  auto c = call(post("/tokenize", R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false})"));
  EXPECT_EQ(c->body()["count"], std::string("user: hi\n").size());
  auto d = call(post("/detokenize", R"({"tokens":[104,105]})"));
  EXPECT_EQ(d->body()["prompt"], "hi");
  EXPECT_EQ(call(post("/detokenize", R"({"tokens":[1000]})"))->resp.status, 400);
  EXPECT_EQ(call(post("/detokenize", R"({"tokens":"x"})"))->resp.status, 400);
  EXPECT_EQ(call(post("/tokenize", R"({"model":"other","prompt":"a"})"))->resp.status, 404);
  EXPECT_EQ(call(post("/tokenize", "{"))->resp.status, 400);
  // Wrong types are 400s that name the field, never an exception.
  for (const char* bad : {R"({"prompt":"a","return_token_strs":"yes"})", R"({"prompt":"a","model":7})",
                          R"({"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":1})", R"({"prompt":5})",
                          R"([1,2])"}) {
    auto r = call(post("/tokenize", bad));
    EXPECT_EQ(r->resp.status, 400) << bad;
    EXPECT_TRUE(r->body()["error"]["code"].is_string()) << bad;
  }
  EXPECT_EQ(call(post("/detokenize", R"({"tokens":[1],"model":"other"})"))->resp.status, 404);
  EXPECT_EQ(call(post("/detokenize", R"({"tokens":[-1]})"))->resp.status, 400);
  EXPECT_EQ(call(post("/detokenize", R"({"tokens":[18446744073709551615]})"))->resp.status, 400);
  EXPECT_EQ(call(get("/health"))->resp.status, 200);
  app->begin_drain();
  EXPECT_EQ(call(get("/health"))->resp.status, 503);
}

TEST_F(AppTest, RequestIdsAreEchoedOrMade) {
  make();
  HttpRequest r = get("/v1/models");
  r.headers.emplace_back("x-request-id", "abc-123");
  EXPECT_EQ(call(r)->header("x-request-id"), "abc-123");
  HttpRequest bad = get("/v1/models");
  bad.headers.emplace_back("x-request-id", std::string(300, 'a'));
  const std::string made = call(bad)->header("x-request-id");
  EXPECT_EQ(made.size(), 32u);
  EXPECT_NE(made, call(get("/v1/models"))->header("x-request-id"));  // fresh every time
  EXPECT_EQ(request_id_for("with space").size(), 32u);
  EXPECT_EQ(request_id_for("ok-ID_1.2").size(), 9u);
  EXPECT_EQ(request_id_for(std::string("nul\0x", 5)).size(), 32u);
  EXPECT_EQ(trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "4bf92f3577b34da6a3ce929d0e0e4736");
  for (const char* bad_tp : {"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                             "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                             "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                             "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "garbage", ""})
    EXPECT_EQ(trace_id_of(bad_tp), "") << bad_tp;
}

TEST_F(AppTest, SeparateAdminListenerOwnsMetrics) {
  ServerConfig c;
  c.admin.port = 0;
  make(c);
  EXPECT_EQ(call(get("/metrics"))->resp.status, 404);
  EXPECT_EQ(call(get("/metrics"), Listener::kAdmin)->resp.status, 200);
  EXPECT_EQ(call(get("/admin/stats"), Listener::kAdmin)->resp.status, 200);
  EXPECT_EQ(call(get("/v1/models"), Listener::kAdmin)->resp.status, 404);
}

TEST_F(AppTest, StatsReportTheHttpConnections) {
  make();
  EXPECT_FALSE(json::parse(call(get("/admin/stats"))->resp.body).contains("connections"));
  app->set_connection_stats([] { return ConnectionStats{3, 8, 5}; });
  const json s = json::parse(call(get("/admin/stats"))->resp.body);
  EXPECT_EQ(s["connections"]["open"], 3);
  EXPECT_EQ(s["connections"]["max"], 8);
  EXPECT_EQ(s["connections"]["rejected"], 5);
  EXPECT_TRUE(s.contains("n_steps_interrupted"));
}

ServerConfig with_keys(OnUnentitled mode) {
  ServerConfig c;
  c.on_unentitled = mode;
  KeyConfig a;
  a.name = "limited";
  a.sha256 = sha256_hex("sk-limited");
  a.tiers = {"standard", "batch"};
  a.default_tier = "batch";
  a.requests_per_min = 2;
  a.tokens_per_min = 1000;
  a.max_concurrent = 1;
  KeyConfig b;
  b.name = "gold";
  b.sha256 = sha256_hex("sk-gold");
  c.keys = {a, b};
  return c;
}

TEST_F(AppTest, KeysAreRequiredExceptForHealth) {
  make(with_keys(OnUnentitled::kDowngrade));
  auto none = call(post("/v1/completions", R"({"prompt":"a"})"));
  EXPECT_EQ(none->resp.status, 401);
  EXPECT_EQ(none->body()["error"]["code"], "invalid_api_key");
  EXPECT_EQ(call(post("/v1/completions", R"({"prompt":"a"})", "sk-wrong"))->resp.status, 401);
  EXPECT_EQ(call(get("/metrics"))->resp.status, 401);
  EXPECT_EQ(call(get("/v1/models"))->resp.status, 401);
  EXPECT_EQ(call(get("/health/live"))->resp.status, 200);
  EXPECT_EQ(call(get("/health/ready"))->resp.status, 200);
  EXPECT_EQ(call(get("/v1/models", "sk-gold"))->resp.status, 200);
  EXPECT_TRUE(backend.reqs.empty());
}

TEST_F(AppTest, UnentitledTierIsDowngradedAndToldSo) {
  make(with_keys(OnUnentitled::kDowngrade));
  auto rec = call(post("/v1/completions", R"({"prompt":"a","max_tokens":4,"service_tier":"priority"})", "sk-limited"));
  ASSERT_EQ(backend.reqs.size(), 1u);
  EXPECT_EQ(backend.reqs[0].tier, rank_of("standard"));  // the best allowed tier below ultrafast
  EXPECT_NE(backend.reqs[0].isolation_key, 0u);
  backend.admit(0, "standard");
  backend.done(0, 1, 0);
  EXPECT_EQ(rec->resp.status, 200);
  EXPECT_EQ(rec->header("x-tierserve-tier-requested"), "ultrafast");
  EXPECT_EQ(rec->header("x-tierserve-tier-served"), "standard");
  EXPECT_EQ(rec->header("x-tierserve-degraded-reason"), "not_entitled");
  EXPECT_EQ(rec->body()["service_tier"], "default");
  EXPECT_EQ(rec->body()["tierserve"]["degraded_reason"], "not_entitled");
  EXPECT_EQ(rec->header("x-ratelimit-limit-requests"), "2");
  EXPECT_EQ(rec->header("x-ratelimit-remaining-requests"), "1");
  EXPECT_EQ(rec->header("x-ratelimit-limit-tokens"), "1000");
  EXPECT_EQ(rec->header("x-ratelimit-remaining-tokens"), "995");
  EXPECT_EQ(rec->header("x-ratelimit-reset-requests"), "30s");
  // The key's default tier applies when the request names none.
  call(post("/v1/completions", R"({"prompt":"a","max_tokens":4})", "sk-limited"));
  EXPECT_EQ(backend.reqs.at(1).tier, rank_of("batch"));
  // The degradation was counted.
  const std::string text = call(get("/metrics", "sk-gold"))->resp.body;
  EXPECT_NE(text.find(R"(tierserve_degradations_total{tier_requested="ultrafast",tier_served="standard",reason="not_entitled"} 1)"),
            std::string::npos)
      << text;
}

TEST_F(AppTest, UnentitledTierRefusedWhenConfigured) {
  make(with_keys(OnUnentitled::kReject));
  auto rec = call(post("/v1/completions", R"({"prompt":"a","service_tier":"ultrafast"})", "sk-limited"));
  EXPECT_EQ(rec->resp.status, 403);
  EXPECT_EQ(rec->body()["error"]["code"], "tier_not_entitled");
  EXPECT_TRUE(backend.reqs.empty());
}

TEST_F(AppTest, KeyLimitsAre429WithRetryAfter) {
  make(with_keys(OnUnentitled::kDowngrade));
  // Concurrency 1: the second while the first runs.
  call(post("/v1/completions", R"({"prompt":"a","max_tokens":4})", "sk-limited"));
  auto busy = call(post("/v1/completions", R"({"prompt":"a","max_tokens":4})", "sk-limited"));
  EXPECT_EQ(busy->resp.status, 429);
  EXPECT_EQ(busy->body()["error"]["code"], "concurrency_limit_exceeded");
  EXPECT_EQ(busy->header("Retry-After"), "1");
  backend.admit(0, "batch");
  backend.done(0, 1, 1);
  // Requests per minute: the first and the refused one... the refused one was not charged.
  call(post("/v1/completions", R"({"prompt":"a","max_tokens":4})", "sk-limited"));
  backend.admit(1, "batch");
  backend.done(1, 1, 1);
  auto rpm = call(post("/v1/completions", R"({"prompt":"a","max_tokens":4})", "sk-limited"));
  EXPECT_EQ(rpm->resp.status, 429);
  EXPECT_EQ(rpm->body()["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(rpm->header("Retry-After"), "30");
  EXPECT_EQ(rpm->header("x-ratelimit-remaining-requests"), "0");
  clock.advance_ns(int64_t(30) * 1000000000);
  call(post("/v1/completions", R"({"prompt":"a","max_tokens":4})", "sk-limited"));
  EXPECT_EQ(backend.reqs.size(), 3u);
  // Tokens per minute: a request that can never fit.
  backend.admit(2, "batch");
  backend.done(2, 1, 1);
  ServerConfig c = with_keys(OnUnentitled::kDowngrade);
  c.keys[0].requests_per_min = 0;
  c.keys[0].tokens_per_min = 10;
  make(c);
  auto big = call(post("/v1/completions", R"({"prompt":"abc","max_tokens":20})", "sk-limited"));
  EXPECT_EQ(big->resp.status, 429);
  EXPECT_NE(big->body()["error"]["message"].get<std::string>().find("lower max_tokens"), std::string::npos);
}

TEST_F(AppTest, TokensPerMinuteHeadersRefundsAndRetryAfter) {
  ServerConfig c = with_keys(OnUnentitled::kDowngrade);
  c.keys[0].requests_per_min = 0;
  c.keys[0].max_concurrent = 0;
  c.keys[0].tokens_per_min = 100;  // refills 1 token per 600 ms
  make(c);
  // "abcd" is 4 tokens (one per byte): 54 charged from the full bucket.
  auto a = call(post("/v1/completions", R"({"prompt":"abcd","max_tokens":50})", "sk-limited"));
  ASSERT_EQ(backend.reqs.size(), 1u);
  // A stream is charged at admission too; its headers go out with the first event.
  auto b = call(post("/v1/completions", R"({"prompt":"abcd","max_tokens":50,"stream":true})", "sk-limited"));
  EXPECT_EQ(b->resp.status, 429);
  EXPECT_EQ(b->body()["error"]["type"], "rate_limit_error");
  EXPECT_EQ(b->body()["error"]["code"], "rate_limit_exceeded");
  EXPECT_EQ(b->body()["error"]["message"],
            "rate limit reached: 100 tokens per minute (available 46, requested 54 = prompt + max_tokens); try again in 5s");
  EXPECT_EQ(b->header("Retry-After"), "5");  // 8 tokens short: 4.8 s
  EXPECT_EQ(b->header("x-ratelimit-limit-tokens"), "100");
  EXPECT_EQ(b->header("x-ratelimit-remaining-tokens"), "46");
  EXPECT_EQ(b->header("x-ratelimit-reset-tokens"), "32.4s");
  EXPECT_EQ(backend.reqs.size(), 1u);
  // The first ends after 10 of its 50 tokens: 40 come back (46 + 40 = 86).
  backend.admit(0, "batch");
  backend.done(0, 4, 10);
  EXPECT_EQ(a->resp.status, 200);
  EXPECT_EQ(a->header("x-ratelimit-remaining-tokens"), "46");
  auto s = call(post("/v1/completions", R"({"prompt":"abcd","max_tokens":50,"stream":true})", "sk-limited"));
  ASSERT_EQ(backend.reqs.size(), 2u);
  backend.admit(1, "batch");
  backend.delta(1, "x");
  EXPECT_TRUE(s->streaming);
  EXPECT_EQ(s->header("x-ratelimit-remaining-tokens"), "32");
  // 32 left, 54 asked; 30 s later 50 more have come in.
  EXPECT_EQ(call(post("/v1/completions", R"({"prompt":"abcd","max_tokens":50})", "sk-limited"))->resp.status, 429);
  clock.advance_ns(int64_t(30) * 1000000000);
  EXPECT_EQ(call(post("/v1/completions", R"({"prompt":"abcd","max_tokens":50})", "sk-limited"))->n_responses, 0);
  EXPECT_EQ(backend.reqs.size(), 3u);
}

TEST(FormatReset, OpenAiStyle) {
  EXPECT_EQ(format_reset(20), "20ms");
  EXPECT_EQ(format_reset(1500), "1.5s");
  EXPECT_EQ(format_reset(360000), "6m0s");
  EXPECT_EQ(format_reset(-5), "0ms");
}

}  // namespace
}  // namespace ts::server

namespace ts::server {
namespace {

TEST(LoadingResponse, LiveButNotReady) {
  HttpRequest r;
  r.method = "GET";
  r.path = "/health/live";
  EXPECT_EQ(loading_response(r).status, 200);
  r.path = "/health/ready";
  EXPECT_EQ(loading_response(r).status, 503);
  r.path = "/v1/completions";
  const HttpResponse c = loading_response(r);
  EXPECT_EQ(c.status, 503);
  EXPECT_NE(c.body.find("\"code\":\"loading\""), std::string::npos);
}

}  // namespace
}  // namespace ts::server
