// The Service's tier behaviour with a real model: preemption under a tight KV budget
// (same tokens as unpreempted runs), queue timeouts (reject, downgrade, promote) driven by
// a ManualClock, FIFO mode, metrics, and the exactly-one-final-update property over a
// random mix of submits and cancels.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "metrics/tierserve_metrics.h"
#include "serving/service.h"
#include "testing/service.h"

namespace ts::serving {
namespace {

using metrics::idx;
using metrics::Metric;
using testing::LoadedModel;
using testing::rank_of;
using testing::Recorder;

std::unique_ptr<Service> make_service(LoadedModel& m, const ServiceOptions& o, metrics::Registry* reg = nullptr,
                                      const Clock* clock = nullptr) {
  auto s = Service::create(*m.model, *m.tok, *m.chat, o, reg, clock);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

uint64_t counter(metrics::Registry& reg, Metric m, const std::vector<std::string>& labels) {
  return reg.counter(idx(m), labels)->value();
}

// Requests submitted to a service, each checked at the end against plain solo decoding.
struct Cases {
  struct Case {
    GenerateRequest req;
    Recorder rec;
  };
  std::vector<std::unique_ptr<Case>> all;

  void submit(Service& svc, GenerateRequest req) {
    auto c = std::make_unique<Case>();
    c->req = std::move(req);
    EXPECT_TRUE(svc.submit(c->req, c->rec.callback()).is_ok());
    all.push_back(std::move(c));
  }
  // Each ends kDone with the text its prompt gives alone (sampling, EOS and the first
  // stop string as requested) and a well-formed update stream.
  void expect_solo_text(LoadedModel& m, int64_t timeout_ms) {
    for (auto& c : all) {
      ASSERT_TRUE(c->rec.wait_final(timeout_ms));
      const Update f = c->rec.final_update();
      ASSERT_EQ(f.kind, Update::Kind::kDone) << c->req.tier << ": " << f.reason << " " << f.message;
      const auto ref = testing::solo_tokens(*m.model, *m.tok, c->req.prompt, int(c->req.max_tokens), c->req.sampling,
                                            c->req.ignore_eos);
      std::string want = testing::tokens_text(*m.tok, ref, c->req.ignore_eos);
      if (!c->req.stop.empty())
        if (const size_t at = want.find(c->req.stop[0]); at != std::string::npos) want.resize(at);
      EXPECT_EQ(c->rec.text(), want) << c->req.tier;
      EXPECT_EQ(c->rec.violations(), 0);
    }
  }
};

// A request of `tier` with a random prompt that generates through EOS.
GenerateRequest random_request(Rng& rng, LoadedModel& m, const std::string& tier, int n_prompt, int n_gen) {
  GenerateRequest r;
  r.tier = rank_of(tier);
  r.prompt = testing::random_prompt(rng, n_prompt, m.model->config().n_vocab);
  r.max_tokens = n_gen;
  r.ignore_eos = true;
  return r;
}

// A tight KV pool (16 blocks of 16 cells) shared by long "slow" requests and "fast" ones
// that arrive later: slow requests are preempted (kPreempted), recompute, and still end
// with exactly the tokens they produce alone; every request completes.
TEST(ServiceTiers, PreemptedRequestsCompleteWithSameTokens) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options(/*n_blocks=*/16, /*budget=*/64, /*chunk=*/32);
  auto reg = metrics::make_tierserve_registry();
  auto svc = make_service(m, o, reg.get());
  ASSERT_TRUE(svc);
  Rng rng(3);
  Cases cases;
  auto submit = [&](const std::string& tier, int n_prompt, int n_gen) {
    GenerateRequest r = random_request(rng, m, tier, n_prompt, n_gen);
    r.preemption_budget = 100;  // this test is about correctness after preemption
    cases.submit(*svc, std::move(r));
  };
  for (int i = 0; i < 4; ++i) submit("slow", 20 + 5 * i, 60);
  ASSERT_TRUE(cases.all[0]->rec.wait_kind(Update::Kind::kDelta));
  for (int i = 0; i < 4; ++i) submit("fast", 30 + 7 * i, 50);
  cases.expect_solo_text(m, 60000);
  int n_preempted = 0;
  for (auto& c : cases.all) {
    n_preempted += c->rec.count(Update::Kind::kPreempted);
    EXPECT_EQ(c->rec.final_update().timings.n_preemptions, c->rec.count(Update::Kind::kPreempted));
  }
  EXPECT_GT(n_preempted, 0);
  EXPECT_EQ(counter(*reg, Metric::kRequests, {"slow", "preempted"}) + counter(*reg, Metric::kRequests, {"fast", "preempted"}),
            uint64_t(n_preempted));
  EXPECT_TRUE(svc->wait_idle(2000));
  EXPECT_EQ(svc->stats().kv.used, 0);
}

// Overload under a tight KV budget with default preemption budgets: every accepted
// request ends with a complete response (no kv_exhausted), and the KV pool is empty after.
TEST(ServiceTiers, TightKvOverloadCompletesEveryAcceptedRequest) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options(/*n_blocks=*/20, /*budget=*/48, /*chunk=*/16);
  auto svc = make_service(m, o);
  ASSERT_TRUE(svc);
  Rng rng(21);
  std::vector<std::unique_ptr<Recorder>> recs;
  for (int i = 0; i < 48; ++i) {
    recs.push_back(std::make_unique<Recorder>());
    GenerateRequest r;
    r.tier = rank_of(rng.next_u64() % 3 == 0 ? "fast" : "slow");
    r.prompt = testing::random_prompt(rng, 1 + int(rng.next_u64() % 60), m.model->config().n_vocab);
    r.max_tokens = 1 + int64_t(rng.next_u64() % 60);
    r.ignore_eos = true;
    ASSERT_TRUE(svc->submit(r, recs.back()->callback()).is_ok());
  }
  int n_done = 0, n_preempted = 0;
  for (auto& rec : recs) {
    ASSERT_TRUE(rec->wait_final(60000));
    const Update f = rec->final_update();
    EXPECT_EQ(f.kind, Update::Kind::kDone) << f.reason << ": " << f.message;
    n_done += f.kind == Update::Kind::kDone;
    n_preempted += f.timings.n_preemptions;
  }
  EXPECT_EQ(n_done, 48);
  std::printf("tight KV overload: %d of 48 done, %d preemptions\n", n_done, n_preempted);
  ASSERT_TRUE(svc->wait_idle(2000));
  EXPECT_EQ(svc->stats().kv.used, 0);
}

// An interrupting tier ("fast", interrupt on): its arrivals abandon the step in flight
// (counted in stats and /metrics) and its prompts run in exclusive steps, while a flood
// of "slow" requests keeps the engine busy. Nothing is lost or changed: every request of
// both tiers ends with exactly its solo tokens.
TEST(ServiceTiers, InterruptingTierCutsInAndNothingChanges) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options(/*n_blocks=*/512, /*budget=*/64, /*chunk=*/32);
  o.sched.tiers[0].interrupt = true;
  o.sched.tiers[0].burst_tokens = 256;
  auto reg = metrics::make_tierserve_registry();
  auto svc = make_service(m, o, reg.get());
  ASSERT_TRUE(svc);
  Rng rng(17);
  Cases cases;
  for (int i = 0; i < 24; ++i) cases.submit(*svc, random_request(rng, m, "slow", 10 + 2 * i, 60));  // 128-token context
  ASSERT_TRUE(cases.all[0]->rec.wait_kind(Update::Kind::kDelta));
  for (int i = 0; i < 20; ++i) {
    cases.submit(*svc, random_request(rng, m, "fast", 20 + 4 * i, 8));
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  cases.expect_solo_text(m, 120000);
  const Stats st = svc->stats();
  std::printf("interrupting tier: %lld of %lld steps interrupted\n", (long long)st.n_interrupted,
              (long long)st.n_steps);
  EXPECT_GT(st.n_interrupted, 0);
  EXPECT_EQ(reg->counter(idx(Metric::kStepsInterrupted), {})->value(), uint64_t(st.n_interrupted));
  EXPECT_TRUE(svc->wait_idle(2000));
  EXPECT_EQ(svc->stats().kv.used, 0);
}

// Speculative decoding (prompt lookup) on a tier with `speculative`: requests that stop
// at max_tokens, on EOS and on stop strings, greedy and seeded, end with exactly the text
// of plain decoding; the drafts are counted, and some are accepted (stories260K repeats
// itself, so its own output is full of n-grams to look up).
TEST(ServiceTiers, SpeculativeDecodingGivesThePlainText) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options(/*n_blocks=*/512, /*budget=*/64, /*chunk=*/32);
  o.sched.tiers[0].speculative = true;
  auto reg = metrics::make_tierserve_registry();
  auto svc = make_service(m, o, reg.get());
  ASSERT_TRUE(svc);
  Rng rng(29);
  Cases cases;
  for (int i = 0; i < 12; ++i) {
    GenerateRequest r = random_request(rng, m, i % 3 == 2 ? "slow" : "fast", 4 + i, 40 + 5 * i);
    r.ignore_eos = i % 2 == 0;
    if (i % 4 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 100 + uint64_t(i);
    }
    if (i == 5) r.stop = {"tree"};
    cases.submit(*svc, std::move(r));
  }
  cases.expect_solo_text(m, 60000);
  const Stats st = svc->stats();
  std::printf("speculative: %lld drafted, %lld accepted\n", (long long)st.n_drafted, (long long)st.n_draft_accepted);
  EXPECT_GT(st.n_drafted, 0);
  EXPECT_GT(st.n_draft_accepted, 0);
  EXPECT_EQ(reg->counter(idx(Metric::kSpeculativeTokens), {"fast", "drafted"})->value(), uint64_t(st.n_drafted));
  EXPECT_EQ(reg->counter(idx(Metric::kSpeculativeTokens), {"slow", "drafted"})->value(), 0u);  // not speculative
  EXPECT_TRUE(svc->wait_idle(2000));
  EXPECT_EQ(svc->stats().kv.used, 0);
}

// Queue timeouts with a ManualClock: "fast" takes one request at a time (max_batch 1),
// so a second one waits; the first one's first token moves the clock past the limit.
struct TimeoutCase {
  std::string on_timeout;  // of the waiting request's tier
  std::string tier;        // the waiting request's tier
};

class ServiceTimeouts : public ::testing::TestWithParam<TimeoutCase> {};

TEST_P(ServiceTimeouts, Delivered) {
  const TimeoutCase tc = GetParam();
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options();
  for (sched::TierConfig& t : o.sched.tiers) {
    if (t.name != tc.tier) continue;
    t.max_batch = 1;
    t.max_queue_wait_ms = 100;
    t.on_timeout = *sched::parse_on_timeout(tc.on_timeout);
  }
  ManualClock clock(1'000'000'000);
  auto reg = metrics::make_tierserve_registry();
  auto svc = make_service(m, o, reg.get(), &clock);
  ASSERT_TRUE(svc);
  Recorder first, waiting;
  std::atomic<bool> moved{false};
  testing::Gate gate;  // both are admitted in one loop iteration
  first.on_update([&](const Update& u) {
    if (u.kind == Update::Kind::kAdmitted) gate.wait();
  });
  first.on_delta([&](const Update&) {
    if (!moved.exchange(true)) clock.advance_ns(1'000'000'000);  // on the loop thread
  });
  GenerateRequest r;
  r.tier = rank_of(tc.tier);
  r.prompt = {1, 100, 200, 300};
  r.max_tokens = 40;
  r.ignore_eos = true;
  ASSERT_TRUE(svc->submit(r, first.callback()).is_ok());
  r.prompt = {1, 101, 201, 301};
  ASSERT_TRUE(svc->submit(r, waiting.callback()).is_ok());
  gate.open();
  ASSERT_TRUE(first.wait_final() && waiting.wait_final());
  EXPECT_EQ(first.final_update().kind, Update::Kind::kDone);
  const Update f = waiting.final_update();
  const auto ups = waiting.updates();
  ASSERT_GE(ups.size(), 2u);
  EXPECT_EQ(ups[0].kind, Update::Kind::kAdmitted);
  EXPECT_TRUE(ups[0].accepted);
  if (tc.on_timeout == "reject") {
    EXPECT_EQ(f.kind, Update::Kind::kFailed);
    EXPECT_EQ(f.reason, sched::Reason::kQueueTimeout);
    EXPECT_FALSE(f.message.empty());
    EXPECT_EQ(f.usage.completion_tokens, 0);
    EXPECT_EQ(counter(*reg, Metric::kRequests, {tc.tier, "rejected"}), 1u);
    EXPECT_EQ(counter(*reg, Metric::kDegradations, {tc.tier, "none", "queue_timeout"}), 1u);
  } else {
    const std::string to = tc.on_timeout == "promote" ? "fast" : "slow";
    EXPECT_EQ(ups[1].kind, Update::Kind::kTierChanged);
    EXPECT_EQ(ups[1].tier_requested, rank_of(tc.tier));
    EXPECT_EQ(ups[1].tier_served, rank_of(to));
    EXPECT_EQ(ups[1].reason, sched::Reason::kQueueTimeout);
    EXPECT_EQ(f.kind, Update::Kind::kDone);
    EXPECT_EQ(f.tier_served, rank_of(to));
    EXPECT_EQ(f.usage.completion_tokens, 40);
    const bool promoted = tc.on_timeout == "promote";
    EXPECT_EQ(counter(*reg, Metric::kRequests, {to, promoted ? "promoted" : "downgraded"}), 1u);
    if (!promoted) {
      EXPECT_EQ(counter(*reg, Metric::kDegradations, {tc.tier, to, "queue_timeout"}), 1u);
    }
  }
  EXPECT_GE(f.timings.queue_ns, 1'000'000'000);  // it waited the second the clock moved
}

INSTANTIATE_TEST_SUITE_P(All, ServiceTimeouts,
                         ::testing::Values(TimeoutCase{"reject", "fast"}, TimeoutCase{"downgrade:slow", "fast"},
                                           TimeoutCase{"promote", "slow"}),
                         [](const auto& info) {
                           std::string n = info.param.on_timeout.substr(0, info.param.on_timeout.find(':'));
                           return n + "_" + info.param.tier;
                         });

// Admission shedding: a full queue refuses at once (final kAdmitted, accepted false).
TEST(ServiceTiers, FullQueueRejectsAtAdmission) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options();
  o.sched.tiers[1].max_queued_requests = 1;
  ManualClock clock(0);
  auto reg = metrics::make_tierserve_registry();
  auto svc = make_service(m, o, reg.get(), &clock);
  ASSERT_TRUE(svc);
  // The loop is held in a callback while eight requests arrive, so they are admitted
  // together: one fits the queue, seven are refused.
  testing::Gate gate;
  Recorder blocker;
  blocker.on_update([&](const Update& u) {
    if (u.kind == Update::Kind::kAdmitted) gate.wait();
  });
  GenerateRequest r;
  r.tier = rank_of("fast");
  r.prompt = {1, 5, 6};
  r.max_tokens = 4;
  ASSERT_TRUE(svc->submit(r, blocker.callback()).is_ok());
  ASSERT_TRUE(blocker.wait_kind(Update::Kind::kAdmitted));
  std::vector<std::unique_ptr<Recorder>> recs;
  r.tier = rank_of("slow");
  for (int i = 0; i < 8; ++i) {
    recs.push_back(std::make_unique<Recorder>());
    ASSERT_TRUE(svc->submit(r, recs.back()->callback()).is_ok());
  }
  gate.open();
  int n_rejected = 0;
  for (auto& rec : recs) {
    ASSERT_TRUE(rec->wait_final());
    const Update f = rec->final_update();
    if (f.kind == Update::Kind::kAdmitted) {
      EXPECT_FALSE(f.accepted);
      EXPECT_EQ(f.reason, sched::Reason::kQueueFull);
      EXPECT_GT(f.retry_after_ms, 0);
      ++n_rejected;
    } else {
      EXPECT_EQ(f.kind, Update::Kind::kDone);
    }
  }
  EXPECT_EQ(n_rejected, 7);
  ASSERT_TRUE(blocker.wait_final());
  EXPECT_EQ(counter(*reg, Metric::kRequests, {"slow", "rejected"}), uint64_t(n_rejected));
}

// FIFO mode: one queue, but responses and metrics keep the requested tier's label.
TEST(ServiceTiers, FifoKeepsLabels) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options();
  o.fifo = true;
  auto reg = metrics::make_tierserve_registry();
  auto svc = make_service(m, o, reg.get());
  ASSERT_TRUE(svc);
  std::vector<std::unique_ptr<Recorder>> recs;
  for (int i = 0; i < 6; ++i) {
    recs.push_back(std::make_unique<Recorder>());
    GenerateRequest r;
    r.tier = rank_of(i % 2 ? "fast" : "slow");
    r.prompt = {1, int32_t(7 + i), 9};
    r.max_tokens = 5;
    r.ignore_eos = true;
    ASSERT_TRUE(svc->submit(r, recs.back()->callback()).is_ok());
  }
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(recs[size_t(i)]->wait_final());
    const auto ups = recs[size_t(i)]->updates();
    EXPECT_EQ(ups.front().tier_served, rank_of(i % 2 ? "fast" : "slow"));
    EXPECT_EQ(recs[size_t(i)]->final_update().kind, Update::Kind::kDone);
  }
  EXPECT_EQ(counter(*reg, Metric::kRequests, {"fast", "ok"}), 3u);
  EXPECT_EQ(counter(*reg, Metric::kRequests, {"slow", "ok"}), 3u);
  EXPECT_EQ(svc->sched_config().tiers.size(), 2u);
}

// With one token per step, tiers serve "fast" first (it may take the whole step and
// "slow" has no floor); FIFO mode serves in arrival order whatever the label.
TEST(ServiceTiers, FifoServesInArrivalOrder) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  for (bool fifo : {false, true}) {
    ServiceOptions o = testing::two_tier_options(256, /*budget=*/1, /*chunk=*/1);
    for (sched::TierConfig& t : o.sched.tiers) t.max_batch = 1;
    o.sched.tiers[0].share_max = 1.0;
    o.sched.tiers[1].share_min = 0.0;  // no floor: "slow" waits while "fast" has work
    o.fifo = fifo;
    auto svc = make_service(m, o);
    ASSERT_TRUE(svc);
    std::mutex mu;
    std::vector<std::string> order;  // tiers in the order their requests finished
    testing::Gate gate;
    Recorder blocker;
    blocker.on_update([&](const Update& u) {
      if (u.kind == Update::Kind::kAdmitted) gate.wait();
    });
    GenerateRequest r;
    r.tier = rank_of("slow");
    r.prompt = {1, 2, 3};
    r.max_tokens = 1;
    ASSERT_TRUE(svc->submit(r, blocker.callback()).is_ok());
    ASSERT_TRUE(blocker.wait_kind(Update::Kind::kAdmitted));
    std::vector<std::unique_ptr<Recorder>> recs;
    for (const char* tier : {"slow", "slow", "fast", "fast"}) {
      recs.push_back(std::make_unique<Recorder>());
      const std::string name = tier;
      recs.back()->on_update([&, name](const Update& u) {
        if (u.kind == Update::Kind::kDone) {
          std::lock_guard<std::mutex> lk(mu);
          order.push_back(name);
        }
      });
      r.tier = rank_of(tier);
      r.max_tokens = 6;
      ASSERT_TRUE(svc->submit(r, recs.back()->callback()).is_ok());
    }
    gate.open();
    for (auto& rec : recs) ASSERT_TRUE(rec->wait_final());
    ASSERT_TRUE(blocker.wait_final());
    svc->shutdown();  // before the recorders go
    std::lock_guard<std::mutex> lk(mu);
    if (fifo) {
      EXPECT_EQ(order, (std::vector<std::string>{"slow", "slow", "fast", "fast"}));
    } else {
      EXPECT_EQ(order, (std::vector<std::string>{"fast", "fast", "slow", "slow"}));
    }
  }
}

// Metrics move with the traffic: outcomes, tokens in/out, histogram counts, gauges.
TEST(ServiceMetrics, SeriesMove) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  auto reg = metrics::make_tierserve_registry();
  auto svc = make_service(m, testing::two_tier_options(), reg.get());
  ASSERT_TRUE(svc);
  int64_t in[2] = {0, 0}, out[2] = {0, 0};
  std::vector<std::unique_ptr<Recorder>> recs;
  for (int i = 0; i < 6; ++i) {
    recs.push_back(std::make_unique<Recorder>());
    GenerateRequest r;
    r.tier = rank_of(i < 2 ? "fast" : "slow");
    r.prompt.assign(size_t(3 + i), int32_t(20 + i));
    r.max_tokens = 3 + i;
    r.ignore_eos = true;
    in[i < 2 ? 0 : 1] += int64_t(r.prompt.size());
    out[i < 2 ? 0 : 1] += r.max_tokens;
    ASSERT_TRUE(svc->submit(r, recs.back()->callback()).is_ok());
  }
  // One cancelled request.
  Recorder cancelled;
  GenerateRequest r;
  r.tier = rank_of("slow");
  r.prompt = {1, 2, 3};
  r.max_tokens = 400;
  r.ignore_eos = true;
  auto id = svc->submit(r, cancelled.callback());
  ASSERT_TRUE(id.is_ok());
  ASSERT_TRUE(cancelled.wait_kind(Update::Kind::kDelta));
  svc->cancel(*id);
  for (auto& rec : recs) ASSERT_TRUE(rec->wait_final());
  ASSERT_TRUE(cancelled.wait_final());
  ASSERT_TRUE(svc->wait_idle(2000));
  const std::string tiers[2] = {"fast", "slow"};
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(counter(*reg, Metric::kRequests, {tiers[t], "ok"}), t == 0 ? 2u : 4u);
    EXPECT_EQ(counter(*reg, Metric::kTokens, {tiers[t], "in"}), uint64_t(in[t] + (t == 1 ? 3 : 0)));
    EXPECT_GE(counter(*reg, Metric::kTokens, {tiers[t], "out"}), uint64_t(out[t]));
    EXPECT_EQ(reg->histogram(idx(Metric::kRequestDuration), {tiers[t]})->count(), t == 0 ? 2u : 4u);
    EXPECT_EQ(reg->histogram(idx(Metric::kTimeToFirstToken), {tiers[t]})->count(), t == 0 ? 2u : 5u);
    EXPECT_EQ(reg->histogram(idx(Metric::kQueueTime), {tiers[t]})->count(), t == 0 ? 2u : 5u);
    EXPECT_EQ(reg->histogram(idx(Metric::kTimePerOutputToken), {tiers[t]})->count(), t == 0 ? 2u : 4u);
  }
  EXPECT_EQ(counter(*reg, Metric::kTokens, {"fast", "out"}), uint64_t(out[0]));
  EXPECT_EQ(counter(*reg, Metric::kRequests, {"slow", "cancelled"}), 1u);
  // The gauges were last set by a step with nothing left of the earlier requests.
  EXPECT_EQ(reg->gauge(idx(Metric::kRunningRequests), {"fast"})->value(), 0.0);
  EXPECT_EQ(reg->gauge(idx(Metric::kQueuedRequests), {"slow"})->value(), 0.0);
}

// The fast/standard latency correlation: per one-second interval, both tiers' mean TTFT
// moves together when they share a bottleneck (here: the loop held for d ms before
// either computes), and the gauge shows it.
TEST(ServiceMetrics, LatencyCorrelationGauge) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options();
  o.sched.tiers.push_back(testing::tier("bulk", 2, 0.0, 1.0, true));
  ManualClock clock(1'000'000'000);
  auto reg = metrics::make_tierserve_registry();
  auto svc = make_service(m, o, reg.get(), &clock);
  ASSERT_TRUE(svc);
  auto run = [&](const std::string& tier, Recorder& rec) {
    GenerateRequest r;
    r.tier = rank_of(tier);
    r.prompt = {1, 2, 3};
    r.max_tokens = 2;
    r.ignore_eos = true;
    return svc->submit(r, rec.callback()).is_ok();
  };
  for (int k = 0; k < 5; ++k) {
    testing::Gate gate;
    Recorder fast, slow, tick;
    const int64_t delay_ns = (50 + 50 * k) * 1'000'000;
    fast.on_update([&](const Update& u) {
      if (u.kind != Update::Kind::kAdmitted) return;
      gate.wait();
      clock.advance_ns(delay_ns);  // both wait this long for their first token
    });
    ASSERT_TRUE(run("fast", fast));
    ASSERT_TRUE(run("slow", slow));
    gate.open();
    ASSERT_TRUE(fast.wait_final() && slow.wait_final());
    EXPECT_EQ(fast.final_update().timings.ttft_ns, delay_ns);
    EXPECT_EQ(slow.final_update().timings.ttft_ns, delay_ns);
    // A second later a third-tier request's step closes the interval.
    clock.advance_ns(1'100'000'000);
    ASSERT_TRUE(run("bulk", tick));
    ASSERT_TRUE(tick.wait_final());
  }
  EXPECT_NEAR(reg->gauge(idx(Metric::kLatencyCorrelation))->value(), 1.0, 1e-6);
}

// Exactly one final update per accepted request over a random mix of tiers, lengths,
// stop strings, cancels (before admission, mid-stream, after the end, unknown ids) and a
// shutdown with work still in flight; never anything after it.
TEST(ServiceProperty, ExactlyOneFinalUpdate) {
  LoadedModel& m = testing::stories();
  ASSERT_TRUE(m.model);
  ServiceOptions o = testing::two_tier_options(/*n_blocks=*/24, /*budget=*/48, /*chunk=*/16);
  o.sched.tiers[0].max_queued_requests = 6;
  auto svc = make_service(m, o);
  ASSERT_TRUE(svc);
  Rng rng(99);
  std::vector<std::unique_ptr<Recorder>> recs;
  std::vector<RequestId> ids;
  for (int i = 0; i < 60; ++i) {
    recs.push_back(std::make_unique<Recorder>());
    GenerateRequest r;
    r.tier = rank_of(rng.next_u64() % 2 ? "fast" : "slow");
    r.prompt = testing::random_prompt(rng, 1 + int(rng.next_u64() % 40), m.model->config().n_vocab);
    r.max_tokens = 1 + int64_t(rng.next_u64() % 60);
    r.ignore_eos = rng.next_u64() % 2;
    if (rng.next_u64() % 3 == 0) r.stop = {"e", "Lily"};
    r.preemption_budget = int32_t(rng.next_u64() % 3);
    auto id = svc->submit(r, recs.back()->callback());
    ASSERT_TRUE(id.is_ok());
    ids.push_back(*id);
    const uint64_t act = rng.next_u64() % 8;
    if (act == 0) svc->cancel(*id);
    if (act == 1) svc->cancel(ids[size_t(rng.next_u64() % ids.size())]);
    if (act == 2) svc->cancel(*id + 1000);
    if (act == 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int i = 0; i < 10; ++i) svc->cancel(ids[size_t(rng.next_u64() % ids.size())]);
  svc->shutdown();
  int n_done = 0, n_failed = 0, n_refused = 0;
  for (auto& rec : recs) {
    EXPECT_EQ(rec->n_final(), 1);
    EXPECT_EQ(rec->violations(), 0);
    const auto ups = rec->updates();
    ASSERT_FALSE(ups.empty());
    EXPECT_EQ(ups.front().kind, Update::Kind::kAdmitted);
    const Update f = rec->final_update();
    n_done += f.kind == Update::Kind::kDone;
    n_failed += f.kind == Update::Kind::kFailed;
    n_refused += f.kind == Update::Kind::kAdmitted;
    if (f.kind == Update::Kind::kDone) {
      EXPECT_TRUE(testing::valid_utf8(rec->text()));
    }
  }
  EXPECT_GT(n_done, 0);
  EXPECT_GT(n_failed, 0);
  EXPECT_EQ(svc->stats().n_active, 0);
  EXPECT_EQ(svc->stats().n_engine_seqs, 0);
  (void)n_refused;
}

}  // namespace
}  // namespace ts::serving
