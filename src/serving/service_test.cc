// The Service end to end with real models: batched == solo through the whole serving
// path, stop strings and max_tokens, streaming, cancellation, drain, validation.
#include "serving/service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "metrics/tierserve_metrics.h"
#include "testing/service.h"

namespace ts::serving {
namespace {

using testing::LoadedModel;
using testing::rank_of;
using testing::Recorder;

engine::SamplingParams seeded(uint64_t seed) {
  engine::SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.repeat_penalty = 1.1f;
  p.seed = seed;
  return p;
}

std::unique_ptr<Service> make_service(LoadedModel& m, const ServiceOptions& o, metrics::Registry* reg = nullptr,
                                      const Clock* clock = nullptr) {
  auto s = Service::create(*m.model, *m.tok, *m.chat, o, reg, clock);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

// N concurrent requests of both tiers, prompts of 1..70 tokens prefilled in chunks,
// greedy and seeded sampling: each one's text and token count equal its solo run.
void expect_batched_equals_solo(LoadedModel& m, int n_req, int n_gen) {
  ASSERT_TRUE(m.model);
  auto svc = make_service(m, testing::two_tier_options());
  ASSERT_TRUE(svc);
  Rng rng(11);
  struct Case {
    GenerateRequest req;
    Recorder rec;
  };
  std::vector<std::unique_ptr<Case>> cases;
  for (int i = 0; i < n_req; ++i) {
    auto c = std::make_unique<Case>();
    c->req.tier = rank_of(i % 3 == 0 ? "fast" : "slow");
    c->req.prompt = testing::random_prompt(rng, 1 + (i * 29 + 7) % 70, m.model->config().n_vocab);
    c->req.max_tokens = n_gen;
    c->req.ignore_eos = true;
    if (i % 2) c->req.sampling = seeded(100 + uint64_t(i));
    cases.push_back(std::move(c));
  }
  for (auto& c : cases) {
    auto id = svc->submit(c->req, c->rec.callback());
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  }
  std::vector<std::string> distinct;
  for (auto& c : cases) {
    ASSERT_TRUE(c->rec.wait_final());
    const Update f = c->rec.final_update();
    ASSERT_EQ(f.kind, Update::Kind::kDone) << f.reason << " " << f.message;
    EXPECT_EQ(f.finish_reason, "length");
    EXPECT_EQ(f.usage.completion_tokens, n_gen);
    EXPECT_EQ(f.usage.prompt_tokens, int64_t(c->req.prompt.size()));
    const auto ref = testing::solo_tokens(*m.model, *m.tok, c->req.prompt, n_gen, c->req.sampling, true);
    const std::string want = testing::tokens_text(*m.tok, ref, true);
    EXPECT_EQ(c->rec.text(), want) << "prompt of " << c->req.prompt.size();
    EXPECT_EQ(c->rec.violations(), 0);
    if (std::find(distinct.begin(), distinct.end(), want) == distinct.end()) distinct.push_back(want);
  }
  EXPECT_GE(distinct.size(), size_t(n_req / 2));  // the outputs depend on the prompts
  EXPECT_TRUE(svc->wait_idle(5000));
  const Stats st = svc->stats();
  EXPECT_EQ(st.n_active, 0);
  EXPECT_EQ(st.n_engine_seqs, 0);
  EXPECT_EQ(st.kv.used, 0);
}

TEST(ServiceBatching, Stories260kEqualsSolo) { expect_batched_equals_solo(testing::stories(), 12, 20); }

TEST(ServiceBatching, RandomLlamaEqualsSolo) { expect_batched_equals_solo(testing::random_llama(), 8, 12); }

// The scheduler finds a cached prefix when it plans the start: a prompt that shares its
// first blocks with a finished one computes only the rest (usage says how much was
// reused), and its output, with a repetition penalty that sees the whole prompt, equals
// its solo run. Another isolation key reuses nothing.
TEST(ServiceBatching, ACachedPrefixIsReusedAndChangesNothing) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  auto svc = make_service(m, testing::two_tier_options());
  ASSERT_TRUE(svc);
  Rng rng(23);
  const std::vector<int32_t> first = testing::random_prompt(rng, 70, m.model->config().n_vocab);
  const std::vector<int32_t> tail = testing::random_prompt(rng, 6, m.model->config().n_vocab);
  auto run = [&](std::vector<int32_t> prompt, uint64_t key) {
    GenerateRequest r;
    r.tier = rank_of("slow");
    r.prompt = std::move(prompt);
    r.max_tokens = 12;
    r.ignore_eos = true;
    r.sampling = seeded(5);
    r.isolation_key = key;
    Recorder rec;
    EXPECT_TRUE(svc->submit(r, rec.callback()).is_ok());
    EXPECT_TRUE(rec.wait_final());
    const Update f = rec.final_update();
    EXPECT_EQ(f.kind, Update::Kind::kDone) << f.reason << " " << f.message;
    const auto ref = testing::solo_tokens(*m.model, *m.tok, r.prompt, 12, r.sampling, true);
    EXPECT_EQ(rec.text(), testing::tokens_text(*m.tok, ref, true));
    return f.usage.cached_prompt_tokens;
  };
  EXPECT_EQ(run(first, 1), 0);
  std::vector<int32_t> second(first.begin(), first.begin() + 64);
  second.insert(second.end(), tail.begin(), tail.end());
  EXPECT_EQ(run(second, 1), 64);  // four blocks of 16
  EXPECT_EQ(run(second, 2), 0);
  EXPECT_EQ(run(first, 1), 64);   // the whole first prompt's full blocks, and the rest computed
  EXPECT_TRUE(svc->wait_idle(5000));
  EXPECT_EQ(svc->stats().kv.used, 0);
  EXPECT_GT(svc->stats().kv.cached, 0);
}

// The default model (Gemma 3 270M: gemma3 architecture, its chat template, a 262k
// vocabulary with multi-byte pieces) end to end: chat prompts rendered and tokenized as
// the server does, three concurrent requests equal their solo runs. Skipped when the
// model is not installed, unless TIERSERVE_REQUIRE_DEFAULT_MODEL is set.
TEST(ServiceBatching, DefaultModelChatEqualsSolo) {
  std::string path;
  if (const char* dir = std::getenv("TIERSERVE_MODEL_DIR"); dir && *dir) {
    path = std::string(dir) + "/gemma-3-270m-q4_k_m.gguf";
  } else {
    const char* home = std::getenv("HOME");
    path = std::string(home ? home : "") + "/.cache/tierserve/models/gemma-3-270m-q4_k_m.gguf";
  }
  if (!std::filesystem::exists(path)) {
    if (std::getenv("TIERSERVE_REQUIRE_DEFAULT_MODEL")) FAIL() << "default model missing: " << path;
    GTEST_SKIP() << "default model not installed: " << path;
  }
  static LoadedModel m = testing::load_model(path);
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options();
  o.engine.max_seq_len = 256;
  o.engine.n_blocks = 64;
  auto svc = make_service(m, o);
  ASSERT_TRUE(svc);
  const char* questions[] = {"What is the capital of France?", "Write a haiku about the sea.",
                             "Sag mir etwas über Zürich."};
  std::vector<std::unique_ptr<Recorder>> recs;
  std::vector<GenerateRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    const std::vector<tok::ChatMessage> msgs = {{"user", questions[i]}};
    auto text = svc->chat_template().render(msgs, true);
    ASSERT_TRUE(text.is_ok());
    GenerateRequest r;
    r.tier = rank_of(i == 0 ? "fast" : "slow");
    r.prompt = svc->tokenizer().encode(*text, true, true);
    r.max_tokens = 10;
    reqs.push_back(r);
    recs.push_back(std::make_unique<Recorder>());
    ASSERT_TRUE(svc->submit(r, recs.back()->callback()).is_ok());
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(recs[size_t(i)]->wait_final(120000));
    const Update f = recs[size_t(i)]->final_update();
    ASSERT_EQ(f.kind, Update::Kind::kDone) << f.reason << " " << f.message;
    const auto ref = testing::solo_tokens(*m.model, *m.tok, reqs[size_t(i)].prompt, 10, {}, false);
    EXPECT_EQ(recs[size_t(i)]->text(), testing::tokens_text(*m.tok, ref, false)) << questions[i];
    EXPECT_EQ(f.usage.completion_tokens, int64_t(ref.size()));
    EXPECT_TRUE(testing::valid_utf8(recs[size_t(i)]->text()));
  }
}

// Stop strings end the text before them (never streamed, even in part); max_tokens ends
// with "length"; the streamed deltas add up to valid UTF-8 equal to the solo text.
TEST(ServiceText, StopStringsAndMaxTokens) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  auto svc = make_service(m, testing::two_tier_options());
  ASSERT_TRUE(svc);
  const std::vector<int32_t> prompt = m.tok->encode("Once upon a time", true, false);
  const auto ref = testing::solo_tokens(*m.model, *m.tok, prompt, 60, {}, true);
  const std::string full = testing::tokens_text(*m.tok, ref, true);
  ASSERT_GT(full.size(), 40u);

  // A stop string from the middle of the text: the answer is the text before its first
  // occurrence; a second stop string that never occurs changes nothing.
  const std::string stop = full.substr(25, 4);
  const size_t cut = full.find(stop);
  {
    Recorder rec;
    GenerateRequest r;
    r.tier = rank_of("slow");
    r.prompt = prompt;
    r.max_tokens = 60;
    r.ignore_eos = true;
    r.stop = {stop, "zzzzqqq"};
    ASSERT_TRUE(svc->submit(r, rec.callback()).is_ok());
    ASSERT_TRUE(rec.wait_final());
    const Update f = rec.final_update();
    ASSERT_EQ(f.kind, Update::Kind::kDone);
    EXPECT_EQ(f.finish_reason, "stop");
    EXPECT_EQ(rec.text(), full.substr(0, cut));
    EXPECT_LT(f.usage.completion_tokens, 60);
    EXPECT_TRUE(testing::valid_utf8(rec.text()));
  }
  // max_tokens.
  for (int n : {1, 7}) {
    Recorder rec;
    GenerateRequest r;
    r.tier = rank_of("fast");
    r.prompt = prompt;
    r.max_tokens = n;
    r.ignore_eos = true;
    ASSERT_TRUE(svc->submit(r, rec.callback()).is_ok());
    ASSERT_TRUE(rec.wait_final());
    const Update f = rec.final_update();
    ASSERT_EQ(f.kind, Update::Kind::kDone);
    EXPECT_EQ(f.finish_reason, "length");
    EXPECT_EQ(f.usage.completion_tokens, n);
    EXPECT_EQ(rec.text(), testing::tokens_text(*m.tok, std::vector<int32_t>(ref.begin(), ref.begin() + n), true));
    EXPECT_GT(f.timings.ttft_ns, 0);
    EXPECT_GE(f.timings.e2e_ns, f.timings.ttft_ns);
  }
  // Without ignore_eos the request ends at the model's end of text ("stop") or at the
  // context ("length"), with the solo text up to there.
  {
    Recorder rec;
    GenerateRequest r;
    r.tier = rank_of("slow");
    r.prompt = prompt;
    r.max_tokens = 400;
    ASSERT_TRUE(svc->submit(r, rec.callback()).is_ok());
    ASSERT_TRUE(rec.wait_final());
    const Update f = rec.final_update();
    ASSERT_EQ(f.kind, Update::Kind::kDone);
    // Output is capped by the context (128 positions for stories260K).
    const int n_cap = int(std::min<int64_t>(400, svc->max_seq_len() - int64_t(prompt.size())));
    const auto solo = testing::solo_tokens(*m.model, *m.tok, prompt, n_cap, {}, false);
    const bool hit_eos = !solo.empty() && m.tok->is_eog(solo.back());
    EXPECT_EQ(f.finish_reason, hit_eos ? "stop" : "length");
    EXPECT_EQ(f.usage.completion_tokens, int64_t(solo.size()));
    EXPECT_EQ(rec.text(), testing::tokens_text(*m.tok, solo, false));
    EXPECT_TRUE(testing::valid_utf8(rec.text()));
  }
}

// Multi-byte text through the random model's byte tokens: every delta is valid UTF-8 on
// its own, and the deltas add up to the final text.
TEST(ServiceText, DeltasAreValidUtf8) {
  LoadedModel& m = testing::random_llama();
  ASSERT_TRUE(m.model);
  auto svc = make_service(m, testing::two_tier_options());
  ASSERT_TRUE(svc);
  Rng rng(5);
  for (int i = 0; i < 4; ++i) {
    Recorder rec;
    GenerateRequest r;
    r.tier = rank_of("slow");
    r.prompt = testing::random_prompt(rng, 9, m.model->config().n_vocab);
    r.max_tokens = 40;
    r.ignore_eos = true;
    r.sampling = seeded(uint64_t(i));
    ASSERT_TRUE(svc->submit(r, rec.callback()).is_ok());
    ASSERT_TRUE(rec.wait_final());
    int32_t n_tokens = 0;
    for (const Update& u : rec.updates())
      if (u.kind == Update::Kind::kDelta) {
        EXPECT_TRUE(testing::valid_utf8(u.text));
        EXPECT_FALSE(u.text.empty());
        n_tokens += u.n_tokens;
      }
    EXPECT_LE(n_tokens, 40);
    const auto ref = testing::solo_tokens(*m.model, *m.tok, r.prompt, 40, r.sampling, true);
    EXPECT_EQ(rec.text(), testing::tokens_text(*m.tok, ref, true));
  }
}

// Cancel mid-generation: the final update is kFailed "cancelled", nothing follows it, and
// the engine holds no sequence and no KV within one step.
TEST(ServiceCancel, FreesTheSequenceWithinOneStep) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  auto svc = make_service(m, testing::two_tier_options());
  ASSERT_TRUE(svc);
  Recorder rec;
  GenerateRequest r;
  r.tier = rank_of("fast");
  r.prompt = m.tok->encode("Once upon a time there was", true, false);
  r.max_tokens = 400;
  r.ignore_eos = true;
  auto id = svc->submit(r, rec.callback());
  ASSERT_TRUE(id.is_ok());
  ASSERT_TRUE(rec.wait_kind(Update::Kind::kDelta));
  const int64_t steps_at_cancel = svc->stats().n_steps;
  svc->cancel(*id);
  ASSERT_TRUE(rec.wait_final());
  const Update f = rec.final_update();
  EXPECT_EQ(f.kind, Update::Kind::kFailed);
  EXPECT_EQ(f.reason, sched::Reason::kCancelled);
  EXPECT_LT(f.usage.completion_tokens, 400);
  ASSERT_TRUE(svc->wait_idle(2000));
  Stats st = svc->stats();
  for (int i = 0; i < 200 && st.n_engine_seqs != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    st = svc->stats();
  }
  EXPECT_EQ(st.n_engine_seqs, 0);
  EXPECT_EQ(st.kv.used, 0);
  EXPECT_LE(st.n_steps, steps_at_cancel + 1);
  // Cancelling again, or an unknown id, is a no-op.
  svc->cancel(*id);
  svc->cancel(987654);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(rec.n_final(), 1);
  EXPECT_EQ(rec.violations(), 0);
}

// Logprobs: one entry per generated token, in order, with the token's text piece; for
// greedy decoding the token is the most likely one (its logprob is the first
// alternative's); values match a log-softmax of the solo run's logits; alternatives are
// sorted. Also with speculative decoding (several tokens per step) and a stop string.
TEST(ServiceText, LogprobsOfEveryGeneratedToken) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options();
  o.sched.tiers[0].speculative = true;
  auto svc = make_service(m, o);
  ASSERT_TRUE(svc);
  const std::vector<int32_t> prompt = m.tok->encode("Once upon a time", true, false);
  const auto ref = testing::solo_tokens(*m.model, *m.tok, prompt, 40, {}, true);
  // The reference log-probabilities of the first generated token.
  auto ctx = engine::Context::create(*m.model, 64, 64);
  ASSERT_TRUE(ctx.is_ok());
  ASSERT_TRUE((*ctx)->eval(prompt).is_ok());
  const auto first_logits = (*ctx)->logits(0);
  double mx = -1e30, sum = 0;
  for (float l : first_logits) mx = std::max(mx, double(l));
  for (float l : first_logits) sum += std::exp(double(l) - mx);
  const double want_first = double(first_logits[size_t(ref[0])]) - (mx + std::log(sum));

  for (const char* tier : {"fast", "slow"}) {
    SCOPED_TRACE(tier);
    Recorder rec;
    GenerateRequest r;
    r.tier = rank_of(tier);
    r.prompt = prompt;
    r.max_tokens = 40;
    r.ignore_eos = true;
    r.logprobs = 3;
    ASSERT_TRUE(svc->submit(r, rec.callback()).is_ok());
    ASSERT_TRUE(rec.wait_final(30000));
    std::vector<TokenLogprob> lp;
    for (const Update& u : rec.updates())
      if (u.kind == Update::Kind::kDelta || u.kind == Update::Kind::kDone)
        lp.insert(lp.end(), u.logprobs.begin(), u.logprobs.end());
    ASSERT_EQ(lp.size(), ref.size());
    EXPECT_NEAR(lp[0].logprob, want_first, 1e-5);
    for (size_t i = 0; i < lp.size(); ++i) {
      EXPECT_EQ(lp[i].token, m.tok->token_to_piece(ref[i])) << i;
      ASSERT_EQ(lp[i].top.size(), 3u);
      EXPECT_EQ(lp[i].top[0].token, lp[i].token) << i;  // greedy: the most likely token
      EXPECT_FLOAT_EQ(lp[i].top[0].logprob, lp[i].logprob) << i;
      EXPECT_LE(lp[i].logprob, 0.0f);
      EXPECT_GE(lp[i].top[0].logprob, lp[i].top[1].logprob);
      EXPECT_GE(lp[i].top[1].logprob, lp[i].top[2].logprob);
    }
  }
  // Off by default: no entries.
  Recorder rec;
  GenerateRequest r;
  r.tier = rank_of("fast");
  r.prompt = prompt;
  r.max_tokens = 8;
  ASSERT_TRUE(svc->submit(r, rec.callback()).is_ok());
  ASSERT_TRUE(rec.wait_final(30000));
  for (const Update& u : rec.updates()) EXPECT_TRUE(u.logprobs.empty());
  r.logprobs = 21;
  EXPECT_EQ(svc->submit(r, rec.callback()).status().code(), StatusCode::kInvalidArgument);
}

TEST(ServiceSubmit, Validation) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  auto svc = make_service(m, testing::two_tier_options());
  ASSERT_TRUE(svc);
  Recorder rec;
  GenerateRequest ok;
  ok.tier = rank_of("fast");
  ok.prompt = {1, 2, 3};
  auto bad = ok;
  bad.tier = rank_of("gold");
  EXPECT_EQ(svc->submit(bad, rec.callback()).status().code(), StatusCode::kInvalidArgument);
  bad = ok;
  bad.prompt.clear();
  EXPECT_EQ(svc->submit(bad, rec.callback()).status().code(), StatusCode::kInvalidArgument);
  bad = ok;
  bad.prompt.assign(size_t(svc->max_seq_len()), 5);
  auto r = svc->submit(bad, rec.callback());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(r.status().message().rfind("context_length_exceeded", 0), 0u) << r.status().message();
  bad = ok;
  bad.max_tokens = 0;
  EXPECT_EQ(svc->submit(bad, rec.callback()).status().code(), StatusCode::kInvalidArgument);
  bad = ok;
  bad.sampling.top_p = 2.0f;
  EXPECT_EQ(svc->submit(bad, rec.callback()).status().code(), StatusCode::kInvalidArgument);
  bad = ok;
  bad.prompt = {1, int32_t(m.model->config().n_vocab)};
  EXPECT_EQ(svc->submit(bad, rec.callback()).status().code(), StatusCode::kInvalidArgument);
  bad = ok;
  bad.sampling.logit_bias = {{int32_t(m.model->config().n_vocab), 1.0f}};
  EXPECT_EQ(svc->submit(bad, rec.callback()).status().code(), StatusCode::kInvalidArgument);
  bad.sampling.logit_bias = {{3, NAN}};
  EXPECT_EQ(svc->submit(bad, rec.callback()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rec.updates().size(), 0u);  // refused requests never reach the callback

  // Ids are unique and increasing; a prompt of max_seq_len - 1 is fine and its output is
  // capped by the context.
  Recorder a, b;
  auto ida = svc->submit(ok, a.callback());
  auto edge = ok;
  edge.prompt.assign(size_t(svc->max_seq_len() - 1), 5);
  edge.max_tokens = 50;
  auto idb = svc->submit(edge, b.callback());
  ASSERT_TRUE(ida.is_ok() && idb.is_ok());
  EXPECT_GT(*idb, *ida);
  ASSERT_TRUE(a.wait_final() && b.wait_final());
  EXPECT_EQ(a.final_update().kind, Update::Kind::kDone);
  const Update fb = b.final_update();
  ASSERT_EQ(fb.kind, Update::Kind::kDone) << fb.reason << " " << fb.message;
  EXPECT_EQ(fb.usage.completion_tokens, 1);
  EXPECT_EQ(svc->sched_config().tiers.front().name, "fast");
}

// Drain: new requests are refused with kUnavailable, the ones in flight complete, and
// wait_idle reports idle. Shutdown afterwards is clean and idempotent.
TEST(ServiceDrain, InFlightCompleteNewRefused) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  auto svc = make_service(m, testing::two_tier_options());
  ASSERT_TRUE(svc);
  std::vector<std::unique_ptr<Recorder>> recs;
  for (int i = 0; i < 5; ++i) {
    recs.push_back(std::make_unique<Recorder>());
    GenerateRequest r;
    r.tier = rank_of(i % 2 ? "fast" : "slow");
    r.prompt = {1, int32_t(10 + i), 20, 30};
    r.max_tokens = 30;
    r.ignore_eos = true;
    ASSERT_TRUE(svc->submit(r, recs.back()->callback()).is_ok());
  }
  svc->begin_drain();
  EXPECT_TRUE(svc->stats().draining);
  Recorder late;
  GenerateRequest r;
  r.tier = rank_of("fast");
  r.prompt = {1, 2};
  EXPECT_EQ(svc->submit(r, late.callback()).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(svc->wait_idle(20000));
  for (auto& rec : recs) {
    EXPECT_EQ(rec->final_update().kind, Update::Kind::kDone);
    EXPECT_EQ(rec->final_update().usage.completion_tokens, 30);
  }
  svc->shutdown();
  svc->shutdown();
  EXPECT_EQ(svc->submit(r, late.callback()).status().code(), StatusCode::kUnavailable);
}

// Shutdown with work in flight: every accepted request gets exactly one final update.
TEST(ServiceDrain, ShutdownEndsEverything) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  auto svc = make_service(m, testing::two_tier_options());
  ASSERT_TRUE(svc);
  std::vector<std::unique_ptr<Recorder>> recs;
  for (int i = 0; i < 6; ++i) {
    recs.push_back(std::make_unique<Recorder>());
    GenerateRequest r;
    r.tier = rank_of("slow");
    r.prompt = {1, int32_t(40 + i)};
    r.max_tokens = 400;
    r.ignore_eos = true;
    ASSERT_TRUE(svc->submit(r, recs.back()->callback()).is_ok());
  }
  ASSERT_TRUE(recs[0]->wait_kind(Update::Kind::kDelta));
  svc->shutdown();
  for (auto& rec : recs) {
    EXPECT_EQ(rec->n_final(), 1);
    EXPECT_EQ(rec->violations(), 0);
    const Update f = rec->final_update();
    EXPECT_TRUE(f.kind == Update::Kind::kFailed || (f.kind == Update::Kind::kAdmitted && !f.accepted));
  }
  EXPECT_EQ(svc->stats().n_active, 0);
  EXPECT_EQ(svc->stats().n_engine_seqs, 0);
}

}  // namespace
}  // namespace ts::serving
