// The fleet's placement rules with a manual clock and no sockets: slots, pools in order,
// borrowing only while idle and given back to a fast arrival, floors and caps, max wait
// (promote, downgrade, reject), model fallback, unhealthy workers, and a ledger in which
// every ticket ends exactly once.
#include "gateway/fleet.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace ts::gateway {
namespace {

constexpr int kFast = 0, kStd = 1, kBatch = 2;
constexpr int kDedicated = 0, kShared = 1;
constexpr int64_t kMs = 1000000;

std::vector<FleetTier> tiers() {
  FleetTier fast{"ultrafast", {kDedicated, kShared}, {}, 0, 0.3, 200 * kMs, OnTimeout::kPromote, -1, 100};
  FleetTier std_{"standard", {kShared}, {kDedicated}, 0.5, 1, 5000 * kMs, OnTimeout::kReject, -1, 100};
  FleetTier batch{"batch", {kShared}, {kDedicated}, 0.05, 1, 0, OnTimeout::kReject, -1, 100};
  return {fast, std_, batch};
}

// What happened to each ticket.
struct Ledger {
  std::map<int, Placement> started;  // by client id
  std::map<int, Refusal> refused;
  std::map<int, int> moved_to;       // tier changes
  std::map<int, uint64_t> ticket;

  Ticket make(int client, int tier, int model = 0) {
    Ticket t;
    t.tier = tier;
    t.model = model;
    t.on_start = [this, client](const Placement& p) {
      EXPECT_FALSE(started.count(client) || refused.count(client)) << "client " << client << " ended twice";
      started[client] = p;
    };
    t.on_refused = [this, client](Refusal r, const std::string&) {
      EXPECT_FALSE(started.count(client) || refused.count(client)) << "client " << client << " ended twice";
      refused[client] = r;
    };
    t.on_tier_changed = [this, client](int, int to, const std::string&) { moved_to[client] = to; };
    return t;
  }
};

struct FleetTest : ::testing::Test {
  ManualClock clock;
  Ledger led;
  std::unique_ptr<Fleet> f;

  // Workers: 0 dedicated (2 slots), 1 and 2 shared (2 slots each); all model 0 and up.
  void make(std::vector<FleetWorker> ws = {{"d0", kDedicated, 0, true, 2}, {"s0", kShared, 0, true, 2}, {"s1", kShared, 0, true, 2}},
            int n_models = 1, std::vector<FleetTier> ts = tiers()) {
    f = std::make_unique<Fleet>(std::vector<std::string>{"dedicated", "shared"}, std::move(ts), std::move(ws), n_models, clock);
    for (int w = 0; w < int(f->workers().size()); ++w) f->set_load(w, WorkerLoad{true, 0, 0, 0});
  }
  uint64_t submit(int client, int tier, int model = 0) {
    const Fleet::Submitted s = f->submit(led.make(client, tier, model));
    EXPECT_TRUE(s.accepted) << s.message;
    led.ticket[client] = s.id;
    return s.id;
  }
  void finish(int client) { f->finished(led.started.at(client).ticket); }
};

TEST_F(FleetTest, FastTierUsesItsDedicatedPoolThenTheSharedOne) {
  make();
  for (int c = 0; c < 4; ++c) submit(c, kFast);
  ASSERT_EQ(led.started.size(), 4u);
  EXPECT_EQ(led.started[0].pool, kDedicated);
  EXPECT_EQ(led.started[1].pool, kDedicated);
  EXPECT_FALSE(led.started[1].pool_fallback);
  // The dedicated pool is full: the shared one, said as a pool fallback, within the fast
  // tier's cap there only while others wait (nobody does: both go).
  EXPECT_EQ(led.started[2].pool, kShared);
  EXPECT_TRUE(led.started[2].pool_fallback);
  EXPECT_EQ(led.started[3].pool, kShared);
}

// Floors are counted per model: the slot of another model's worker in the same pool is not
// the standard tier's share, so a one-slot worker keeps the tier order (the floor rounds
// down to no slot) and the fast request goes first when the slot frees.
TEST_F(FleetTest, SharesAreCountedPerModelAndAOneSlotPoolKeepsTheTierOrder) {
  make({{"a", kShared, 0, false, 1}, {"b", kShared, 1, false, 1}}, 2);
  submit(0, kBatch, 0);
  ASSERT_EQ(led.started.size(), 1u);
  submit(1, kStd, 0);
  submit(2, kFast, 0);
  EXPECT_EQ(led.started.size(), 1u);
  finish(0);
  ASSERT_TRUE(led.started.count(2));
  EXPECT_FALSE(led.started.count(1));
  finish(2);
  EXPECT_TRUE(led.started.count(1));
  // The other model's worker served nothing of model 0.
  for (const auto& [c, p] : led.started) EXPECT_EQ(p.worker, 0) << c;
}

TEST_F(FleetTest, WithoutADedicatedPoolTheSharedOneIsTheFastTiersOwn) {
  make({{"s0", kShared, 0, true, 2}});
  submit(0, kFast);
  ASSERT_EQ(led.started.size(), 1u);
  EXPECT_EQ(led.started[0].pool, kShared);
  EXPECT_FALSE(led.started[0].pool_fallback);  // no dedicated worker exists: nothing to fall back from
}

TEST_F(FleetTest, StandardBorrowsTheIdleDedicatedPoolAndGivesItBackToAFastArrival) {
  make();
  for (int c = 0; c < 4; ++c) submit(c, kStd);  // the shared pool's 4 slots
  submit(4, kStd);                                // borrows the idle dedicated pool
  ASSERT_EQ(led.started.size(), 5u);
  EXPECT_EQ(led.started[4].pool, kDedicated);
  EXPECT_TRUE(led.started[4].borrowed);
  submit(5, kStd);  // borrows the second dedicated slot
  EXPECT_TRUE(led.started[5].borrowed);
  submit(6, kStd);  // nothing free: waits
  EXPECT_FALSE(led.started.count(6));
  // A fast arrival is not held behind the borrowed requests: on a worker that honours
  // priorities it goes at once (the worker's scheduler puts it first).
  submit(7, kFast);
  ASSERT_TRUE(led.started.count(7));
  EXPECT_EQ(led.started[7].pool, kDedicated);
  EXPECT_FALSE(led.started[7].borrowed);
  // While a fast request is on the dedicated worker, nothing more is borrowed there.
  finish(4);
  EXPECT_FALSE(led.started.count(6));
  finish(0);  // a shared slot frees: the waiting standard request takes it
  ASSERT_TRUE(led.started.count(6));
  EXPECT_EQ(led.started[6].pool, kShared);
}

TEST_F(FleetTest, NoBorrowingFromWorkersWithoutPriorities) {
  make({{"d0", kDedicated, 0, /*honours_priority=*/false, 2}, {"s0", kShared, 0, true, 1}});
  submit(0, kStd);
  submit(1, kStd);  // the dedicated llama.cpp-like worker cannot be borrowed: it waits
  EXPECT_EQ(led.started.size(), 1u);
  submit(2, kFast);
  EXPECT_EQ(led.started[2].pool, kDedicated);
}

TEST_F(FleetTest, StandardFloorGoesFirstAndFastCapHoldsWhileOthersWait) {
  // One shared pool of 10 slots, no dedicated workers.
  make({{"s0", kShared, 0, true, 10}});
  for (int c = 0; c < 10; ++c) submit(c, kFast);  // nobody else waits: the fast tier fills it
  EXPECT_EQ(led.started.size(), 10u);
  for (int c = 10; c < 20; ++c) submit(c, kStd);
  for (int c = 20; c < 30; ++c) submit(c, kFast);
  // As slots free, standard (below its 0.5 floor) goes first until it holds 5; then the
  // fast tier within its cap of 3 (0.3 x 10) while standard still waits.
  for (int c = 0; c < 10; ++c) finish(c);
  int std_running = 0, fast_running = 0;
  for (const auto& [c, p] : led.started)
    if (c >= 10) (p.tier == kStd ? std_running : fast_running) += 1;
  EXPECT_GE(std_running, 5);
  EXPECT_LE(fast_running, 3);
  EXPECT_EQ(std_running + fast_running, 10);
}

TEST_F(FleetTest, MaxWaitPromotesDowngradesOrRejects) {
  std::vector<FleetTier> ts = tiers();
  ts[kStd].on_timeout = OnTimeout::kDowngrade;
  ts[kStd].downgrade_to = kBatch;
  ts[kBatch].max_wait_ns = 1000 * kMs;
  make({{"s0", kShared, 0, true, 2}}, 1, ts);
  submit(0, kStd);  // runs
  submit(9, kStd);  // runs: the pool is full
  submit(1, kStd);  // waits
  submit(2, kFast);
  clock.advance_ns(250 * kMs);
  f->tick();  // the fast ticket is promoted (to the head of its line); standard not yet due
  EXPECT_FALSE(led.started.count(2));
  // Standard holds its floor (one of the two slots), so the promoted fast ticket is next.
  // (A promotion never takes another tier's floor, as in one server.)
  finish(0);
  ASSERT_TRUE(led.started.count(2));
  EXPECT_TRUE(led.started[2].promoted);
  clock.advance_ns(5000 * kMs);
  f->tick();  // standard's max wait: downgraded to batch, said
  EXPECT_EQ(led.moved_to.at(1), kBatch);
  clock.advance_ns(1001 * kMs);
  f->tick();  // batch's: refused
  EXPECT_EQ(led.refused.at(1), Refusal::kQueueTimeout);
}

TEST_F(FleetTest, ModelFallbackWhenTheChosenModelIsSaturated) {
  make({{"small", kShared, 0, true, 1}, {"full", kShared, 1, true, 1}}, 2);
  Ticket a = led.make(0, kStd, 0);
  ASSERT_TRUE(f->submit(std::move(a)).accepted);
  Ticket b = led.make(1, kStd, 0);
  b.fallback_model = 1;
  ASSERT_TRUE(f->submit(std::move(b)).accepted);
  ASSERT_TRUE(led.started.count(1));
  EXPECT_EQ(led.started[1].model, 1);
  EXPECT_TRUE(led.started[1].model_fallback);
  Ticket c = led.make(2, kStd, 0);  // no fallback configured: it waits for its model
  ASSERT_TRUE(f->submit(std::move(c)).accepted);
  EXPECT_FALSE(led.started.count(2));
}

TEST_F(FleetTest, UnhealthyWorkersLeaveAndTheirWaitersAreToldWhenNoneIsLeft) {
  make({{"a", kShared, 0, true, 1}, {"b", kShared, 0, true, 1}});
  submit(0, kStd);
  submit(1, kStd);
  submit(2, kStd);  // waits
  f->set_load(0, WorkerLoad{false, 0, 0, 0});
  EXPECT_FALSE(led.refused.count(2));  // b still serves the model
  finish(1);
  ASSERT_TRUE(led.started.count(2));
  EXPECT_EQ(led.started[2].worker, 1);
  submit(3, kStd);  // waits for b
  f->set_load(1, WorkerLoad{false, 0, 0, 0});
  EXPECT_EQ(led.refused.at(3), Refusal::kNoHealthyWorker);
  const Fleet::Submitted s = f->submit(led.make(4, kStd));
  EXPECT_FALSE(s.accepted);
  EXPECT_EQ(s.why, Refusal::kNoHealthyWorker);
}

TEST_F(FleetTest, LeastLoadedWorkerAndARetryAvoidsTheOneThatFailed) {
  make({{"a", kShared, 0, true, 4}, {"b", kShared, 0, true, 4}});
  f->set_load(0, WorkerLoad{true, 3, 1, 0.5});  // a reports a queue of its own
  submit(0, kStd);
  EXPECT_EQ(led.started[0].worker, 1);
  Ticket t = led.make(1, kStd);
  t.exclude_worker = 1;
  t.at_head = true;
  ASSERT_TRUE(f->submit(std::move(t)).accepted);
  EXPECT_EQ(led.started[1].worker, 0);
  // With no other worker up, the retry may go back to the one that failed.
  f->set_load(0, WorkerLoad{false, 0, 0, 0});
  Ticket u = led.make(2, kStd);
  u.exclude_worker = 1;
  ASSERT_TRUE(f->submit(std::move(u)).accepted);
  EXPECT_EQ(led.started[2].worker, 1);
}

TEST_F(FleetTest, QueueLimitAndCancelAndALedgerOfOneOutcomeEach) {
  std::vector<FleetTier> ts = tiers();
  ts[kStd].max_queued = 3;
  make({{"s0", kShared, 0, true, 2}}, 1, ts);
  int refused_now = 0, cancelled = 0;
  for (int c = 0; c < 10; ++c) {
    const Fleet::Submitted s = f->submit(led.make(c, kStd));
    if (!s.accepted) {
      EXPECT_EQ(s.why, Refusal::kQueueFull);
      ++refused_now;
    } else {
      led.ticket[c] = s.id;
    }
  }
  EXPECT_EQ(refused_now, 5);  // 2 running, 3 waiting
  EXPECT_TRUE(f->cancel(led.ticket[4]));
  ++cancelled;
  EXPECT_FALSE(f->cancel(led.ticket[0]));  // running: not cancellable here
  // Drain: every accepted ticket that was not cancelled starts exactly once.
  while (f->n_inflight() > 0) {
    for (const auto& [c, p] : std::map<int, Placement>(led.started)) f->finished(p.ticket);
  }
  EXPECT_EQ(int(led.started.size()) + refused_now + cancelled, 10);
  EXPECT_EQ(f->n_queued(), 0);
}

// Shadow traffic's tier: below every paying one, within a hard cap of the slots even when
// nobody else waits (the rest stay free for paying requests), never promoted, and dropped
// at its max wait; a paying arrival is placed before a waiting shadow.
TEST_F(FleetTest, ShadowTierStaysWithinItsCapAndIsDroppedFirst) {
  std::vector<FleetTier> ts = tiers();
  FleetTier shadow{"shadow", {kShared}, {}, 0, 0.25, 100 * kMs, OnTimeout::kReject, -1, 4};
  shadow.hard_cap = true;
  ts.push_back(shadow);
  constexpr int kShadow = 3;
  make({{"s0", kShared, 0, true, 4}, {"s1", kShared, 0, true, 4}}, 1, ts);  // 8 slots
  for (int c = 0; c < 4; ++c) submit(100 + c, kShadow);
  EXPECT_EQ(led.started.size(), 2u) << "a quarter of 8 slots, with nobody else waiting";
  // The queue bound (4 waiting): the next one is refused at once.
  submit(104, kShadow);
  submit(105, kShadow);
  const Fleet::Submitted over = f->submit(led.make(106, kShadow));
  EXPECT_FALSE(over.accepted);
  EXPECT_EQ(over.why, Refusal::kQueueFull);
  // Paying requests take the 6 free slots, before the waiting shadows.
  for (int c = 0; c < 6; ++c) submit(c, kStd);
  for (int c = 0; c < 6; ++c) EXPECT_TRUE(led.started.count(c)) << c;
  // A slot frees: the next paying arrival, not a shadow, gets it.
  finish(0);
  submit(6, kStd);
  EXPECT_TRUE(led.started.count(6));
  EXPECT_FALSE(led.started.count(102));
  // Past the max wait the waiting shadows are dropped (never promoted past the cap).
  clock.advance_ns(150 * kMs);
  f->tick();
  for (int c = 102; c < 106; ++c) {
    ASSERT_TRUE(led.refused.count(c)) << c;
    EXPECT_EQ(led.refused[c], Refusal::kQueueTimeout);
  }
  EXPECT_EQ(led.started.size(), 2u + 7u);
}

}  // namespace
}  // namespace ts::gateway
