// Scheduler::schedule(): one step's plan. The order of the phases is the algorithm of
// docs/scheduler.md:
//   1. service rates, 2. timeouts, 3. candidates and token demand per tier,
//   4. token shares (reserve floors, share within caps, lend), 5. packing under KV with
//   preemption of lower-tier work above its floor, 6. top-up of idle tokens,
//   7. deadlock breaker, 8. the plan and per-tier accounting.
// KV blocks are allocated for real while packing (the scheduler owns them, kv_): a
// request that starts reuses its cached prefix at once (its demand counted it already),
// a preemption frees its blocks on the spot, and every planned token has its cell.
#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "kv/blocks.h"
#include "sched/scheduler.h"
#include "sched/shares.h"

namespace ts::sched {

struct Scheduler::Candidate {
  Req* q = nullptr;
  int64_t want = 0;     // tokens it could compute this step within the budget
  int64_t want_burst = 0;  // ... and with its tier's burst on top (>= want)
  int64_t planned = 0;  // tokens given
  int64_t blocks = 0;   // KV blocks those tokens take (and a prefix attached for them)
  int64_t hit = 0;      // a queued request's cached prefix, in tokens, when collected
  bool skip = false;    // preempted during this plan
};

struct Scheduler::StepCtx {
  int64_t now_ns = 0;
  int64_t budget = 0;
  int32_t n_tiers = 0;
  std::vector<std::vector<Candidate>> cands;  // per tier, in service order
  std::vector<int64_t> demand, grant, tok_floor, tok_cap, planned;
  std::vector<int64_t> kv_held, kv_floor, kv_cap, kv_reserve;
  std::vector<bool> kv_limited;
  std::vector<kv::BlockCopy> copies;  // copy-on-write the reservations asked for
  TierId packing = 0;   // tiers after it still have their KV floors reserved
  std::vector<RequestId> preempted;
  // Growth reserve (growth_reserve()): each running request's share, and the sum.
  std::unordered_map<const Req*, int64_t> reserve_of;
  int64_t reserve_total = 0;
  std::unordered_set<const Req*> in_plan;  // got tokens in this plan: never a victim
  bool exclusive = false;                  // make_exclusive(): interrupting tiers only
  bool exclusive_forced = false;           // ... for a promoted request, past the window's limits
  std::vector<int64_t> entitled;           // min(floor, demand) per tier, before make_exclusive
  std::vector<int64_t> entitled_ns;        // ... and what those tokens cost (floor_cost())
};

namespace {
constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 4;
}

void Scheduler::observe_service_rates(int64_t now_ns) {
  if (last_now_ns_ < 0) return;
  const int64_t dt = now_ns - last_now_ns_;
  for (TierState& s : ts_) {
    s.rate.observe(dt, s.n_started, s.backlogged);
    s.capped_rate.observe(dt, int32_t(std::min<int64_t>(s.n_tokens, INT32_MAX)), s.capped);
    s.n_started = 0;
    s.n_tokens = 0;
  }
}

void Scheduler::apply_timeouts(int64_t now_ns) {
  for (TierId t = 0; t < n_tiers(); ++t) {
    const TierPolicy& p = tiers_[size_t(t)];
    if (p.max_wait_ns() <= 0) continue;
    std::vector<RequestId> due;
    for (const QueueItem& it : ts_[size_t(t)].queue->items()) {
      const Req& q = reqs_.at(it.id);
      if (!q.started && !q.promoted && now_ns - q.enqueued_ns >= p.max_wait_ns()) due.push_back(it.id);
    }
    for (RequestId id : due) {
      Req& q = reqs_.at(id);
      const std::string waited = "waited " + std::to_string((now_ns - q.enqueued_ns) / 1'000'000) + " ms on tier '" +
                                 p.name() + "' (max " + std::to_string(p.config().max_queue_wait_ms) + " ms)";
      const Move m = p.timeout_rule().at_timeout(t);
      switch (m.kind) {
        case Move::kStay: break;
        case Move::kHeadOfLine:
          dequeue(q);
          q.promoted = true;
          enqueue(q, t, true, now_ns);
          emit(EventKind::kPromoted, q, t, Reason::kQueueTimeout, waited + "; moved to the head of the line");
          break;
        case Move::kToTier:
          dequeue(q);
          enqueue(q, m.tier, m.tier < t, now_ns);
          emit(p.timeout_rule().event(), q, t, Reason::kQueueTimeout,
               waited + "; moved to tier '" + tiers_[size_t(m.tier)].name() + "'");
          break;
        case Move::kReject:
          end(id, EventKind::kRejected, Reason::kQueueTimeout, waited);
          break;
      }
    }
  }
}

void Scheduler::collect_candidates(StepCtx& c) {
  const int64_t chunk = cfg_.max_chunk_tokens > 0 ? std::min(cfg_.max_chunk_tokens, c.budget) : c.budget;
  for (TierId t = 0; t < c.n_tiers; ++t) {
    const TierState& s = ts_[size_t(t)];
    const int32_t max_batch = tiers_[size_t(t)].config().max_batch;
    const int64_t burst = tiers_[size_t(t)].config().burst_tokens;
    const int64_t chunk_burst = cfg_.max_chunk_tokens > 0 ? std::min(cfg_.max_chunk_tokens, c.budget + burst) : c.budget + burst;
    auto& out = c.cands[size_t(t)];
    int64_t urgent = 0;
    auto add = [&](RequestId id) {
      if (int32_t(out.size()) >= max_batch) return;
      Req& q = reqs_.at(id);
      const int64_t hit = prefix_hit(q), left = q.remaining() - hit;
      const int64_t want = std::min(left, chunk);
      if (want <= 0) return;
      out.push_back(Candidate{&q, want, std::min(left, chunk_burst), 0, 0, hit});
      c.demand[size_t(t)] += want;
      if (q.promoted) urgent += want;
    };
    // Promoted requests first (their wait is over), then decodes and unfinished chunks
    // of running requests, then the queue in its policy's order. Running requests keep
    // their batch slots: they hold KV and free it only by finishing, so waiting ones
    // (promoted or not) must never crowd them out of the batch.
    const int32_t promoted_slots = max_batch - std::min<int32_t>(max_batch, int32_t(s.running.size()));
    for (const QueueItem& it : s.queue->items())
      if (reqs_.at(it.id).promoted && int32_t(out.size()) < promoted_slots) add(it.id);
    for (RequestId id : s.running) add(id);
    for (const QueueItem& it : s.queue->items())
      if (!reqs_.at(it.id).promoted) add(it.id);
    c.demand[size_t(t)] = std::min(c.demand[size_t(t)], c.budget);
    const TierPolicy& p = tiers_[size_t(t)];
    c.tok_floor[size_t(t)] = p.floor_of(c.budget);
    // Promoted requests are exempt from the cap (never from the others' floors).
    c.tok_cap[size_t(t)] = std::min(p.cap_of(c.budget) + urgent, c.budget);
  }
}

// The tokens of `cand` under its tier's KV limits: up to n more tokens; returns how many.
int64_t Scheduler::place(StepCtx& c, Candidate& cand, int64_t n, bool may_preempt) {
  Req& q = *cand.q;
  const TierId t = q.served;
  const int32_t bs = cfg_.kv_block_size;
  auto limit = [&]() {
    int64_t reserved = 0;  // floors of tiers not packed yet
    for (TierId u = c.packing + 1; u < c.n_tiers; ++u)
      if (u != t) reserved += c.kv_reserve[size_t(u)];
    const int64_t room = tiers_[size_t(t)].borrows() ? kUnlimited : c.kv_cap[size_t(t)] - c.kv_held[size_t(t)];
    return std::max<int64_t>(0, std::min(int64_t(kv_.n_available()) - reserved, room));
  };
  const bool starting = q.state == RequestState::kQueued && cand.planned == 0;
  if (starting && !attach_prefix(c, cand)) return 0;
  const int64_t at = q.n_computed + cand.planned, held = q.n_blocks + cand.blocks;
  n = std::min(n, q.remaining() - cand.planned);
  if (n <= 0) {
    if (starting) detach_prefix(c, cand);
    return 0;
  }
  int64_t need = kv_.blocks_needed(q.r.id, cand.planned + n);
  int64_t lim = limit();
  if (starting) {
    // Start (or resume) only what can reach its next output and one decode after it,
    // and only while the running requests keep room to grow: a request started in
    // blocks that its later chunks (or the others' decodes) need would only be
    // preempted again, and thrash.
    const int64_t full = kv::blocks_to_append(at, held, q.remaining() + 1, bs) + growth_reserve(c, q);
    if (full > lim && may_preempt && preempt_for(c, q, full - lim)) lim = limit();
    if (full > lim) {
      c.kv_limited[size_t(t)] = true;
      detach_prefix(c, cand);
      return 0;
    }
  }
  if (need > lim && may_preempt && preempt_for(c, q, need - lim)) lim = limit();
  if (need > lim) {
    c.kv_limited[size_t(t)] = true;
    n = std::min(n, kv::tokens_that_fit(at, held, lim, bs));
    need = n > 0 ? kv_.blocks_needed(q.r.id, cand.planned + n) : 0;
    if (need > lim) n = 0;  // a copy-on-write the estimate did not see
  }
  // The cells, for real: nothing planned is ever refused for room by the engine.
  if (n > 0 && !kv_.reserve(q.r.id, cand.planned + n, &c.copies)) n = 0;
  if (n <= 0) {
    if (starting) detach_prefix(c, cand);
    return 0;
  }
  c.in_plan.insert(&q);
  cand.planned += n;
  cand.blocks += need;
  c.kv_held[size_t(t)] += need;
  if (auto it = c.reserve_of.find(&q); it != c.reserve_of.end()) {
    const int64_t r = reserve_need(q, cand.planned, cand.blocks);
    c.reserve_total += r - it->second;
    it->second = r;
  }
  c.kv_reserve[size_t(t)] = std::max<int64_t>(0, c.kv_reserve[size_t(t)] - need);
  c.planned[size_t(t)] += n;
  return n;
}

// A queued request's cached prefix (tokens), seen before it is planned; 0 without ids.
// Asked every step while it waits: the match resumes where the last one ended unless a
// cached block was dropped since (tokens only ever grow, so the matched part stays).
int64_t Scheduler::prefix_hit(Req& q) const {
  if (q.state != RequestState::kQueued || q.n_computed != 0 || !q.has_ids) return 0;
  return kv_.match_prefix(q.r.isolation_key, q.r.tokens, kUnlimited, &q.probe);
}

// A starting request takes its cached prefix now (the blocks are retained for it: no
// later allocation in this plan can reclaim them). False when nothing is left to compute.
bool Scheduler::attach_prefix(StepCtx& c, Candidate& cand) {
  Req& q = *cand.q;
  if (cand.hit > 0 && q.n_computed == 0 && q.n_blocks == 0) {
    q.n_computed = kv_.reuse_prefix(q.r.id, q.r.tokens, kUnlimited);
    cand.blocks = kv_.n_seq_blocks(q.r.id);
    c.kv_held[size_t(q.served)] += cand.blocks;
  }
  return q.remaining() > 0;
}

// ... and gives it back when it is not planned after all (a queued request holds nothing).
void Scheduler::detach_prefix(StepCtx& c, Candidate& cand) {
  Req& q = *cand.q;
  if (q.state != RequestState::kQueued || cand.planned > 0) return;
  c.kv_held[size_t(q.served)] -= cand.blocks;
  cand.blocks = 0;
  kv_.free(q.r.id);
  q.n_computed = 0;
}

// Frees at least n_blocks for `for_req` (of tier t) by preempting running work that is
// not in this plan yet, lowest tier first:
//   - lower tiers, down to (never below) their KV floor;
//   - t's own requests started after for_req, when for_req is running (it cannot
//     continue otherwise; the newest gives way, as in vLLM);
//   - higher tiers only while t is below its floor, and only down to their cap: what a
//     tier holds beyond its cap was borrowed, and the lender takes it back.
// Within a tier the victim is chosen by cost: when one request alone frees what is still
// missing, the one with the least computed (least work to redo) among those; otherwise
// the newest, and on to the next. Requests whose preemption budget is spent are never
// chosen. Preempts nothing unless that frees enough.
bool Scheduler::preempt_for(StepCtx& c, Req& for_req, int64_t n_blocks) {
  const TierId t = for_req.served;
  const bool below_floor = c.kv_held[size_t(t)] < c.kv_floor[size_t(t)];
  std::vector<Req*> victims;
  int64_t freed = 0;
  for (TierId u = c.n_tiers - 1; u >= 0 && freed < n_blocks; --u) {
    if (u < t && (!below_floor || c.kv_held[size_t(u)] <= c.kv_cap[size_t(u)])) continue;
    if (u == t && for_req.state != RequestState::kRunning) continue;
    // Eligible requests of tier u, newest first.
    std::vector<Req*> pool;
    const auto& running = ts_[size_t(u)].running;
    for (auto it = running.rbegin(); it != running.rend(); ++it) {
      Req& v = reqs_.at(*it);
      if (&v == &for_req) break;  // same tier: only requests newer than for_req
      if (v.n_blocks == 0 || v.n_preemptions >= v.budget || c.in_plan.count(&v)) continue;
      pool.push_back(&v);
    }
    int64_t held = c.kv_held[size_t(u)];
    while (freed < n_blocks) {
      auto allowed = [&](const Req* v) {
        if (!v) return false;
        if (u > t && held - v->n_blocks < c.kv_floor[size_t(u)]) return false;
        if (u < t && held - v->n_blocks < c.kv_cap[size_t(u)]) return false;  // only what it borrowed
        return true;
      };
      Req** pick = nullptr;
      for (Req*& v : pool)  // the cheapest one that suffices alone
        if (allowed(v) && v->n_blocks >= n_blocks - freed && (!pick || v->n_computed < (*pick)->n_computed)) pick = &v;
      if (!pick)
        for (Req*& v : pool)  // else the newest
          if (allowed(v)) {
            pick = &v;
            break;
          }
      if (!pick) break;
      victims.push_back(*pick);
      held -= (*pick)->n_blocks;
      freed += (*pick)->n_blocks;
      *pick = nullptr;
    }
  }
  if (freed < n_blocks) return false;
  for (Req* v : victims) {
    preempt(c, *v, Reason::kKvPressure);
    events_.back().text = "preempted (" + std::to_string(v->n_preemptions) + " of " + std::to_string(v->budget) +
                          "): KV blocks for a request of tier '" + tiers_[size_t(t)].name() + "'";
  }
  return true;
}

// The blocks running request `r` needs to compute the next kv_reserve_tokens (one block
// by default) after this plan gave it `planned` tokens in `blocks` new blocks. A queued
// request starts only if the running ones keep that much free (growth_reserve()):
// without it every start fills the cache to the last block, the next decodes find none,
// and the scheduler preempts (recomputes) work it has just done, until budgets run out
// (kv_exhausted).
int64_t Scheduler::reserve_need(const Req& r, int64_t planned, int64_t blocks) const {
  const int32_t bs = cfg_.kv_block_size;
  const int64_t horizon = cfg_.kv_reserve_tokens > 0 ? cfg_.kv_reserve_tokens : bs;
  const int64_t at = r.n_computed + planned;
  // Tokens it will still compute: the known ones not in this plan, then its outputs.
  const int64_t future = std::max<int64_t>(0, r.n_known() - at + r.r.max_output_tokens - r.n_generated - 1);
  return kv::blocks_to_append(at, r.n_blocks + blocks, std::min(horizon, future), bs);
}

int64_t Scheduler::growth_reserve(const StepCtx& c, const Req& except) const {
  auto it = c.reserve_of.find(&except);
  return c.reserve_total - (it == c.reserve_of.end() ? 0 : it->second);
}

void Scheduler::preempt(StepCtx& c, Req& q, Reason reason) {
  const TierId u = q.served;
  TierState& s = ts_[size_t(u)];
  auto r = std::find(s.running.begin(), s.running.end(), q.r.id);
  TS_CHECK(r != s.running.end());
  s.running.erase(r);
  s.kv_held -= q.n_blocks;
  c.kv_held[size_t(u)] -= q.n_blocks;
  kv_.free(q.r.id);  // on the spot: the blocks are free (full ones cached) for this plan
  if (auto it = c.reserve_of.find(&q); it != c.reserve_of.end()) {
    c.reserve_total -= it->second;
    c.reserve_of.erase(it);
  }
  q.n_blocks = 0;
  q.n_computed = 0;
  ++q.n_preemptions;
  enqueue(q, u, true, c.now_ns);  // back at the head of its line; started, so no timeout
  for (Candidate& x : c.cands[size_t(u)])
    if (x.q == &q) x.skip = true;
  c.preempted.push_back(q.r.id);
  emit(EventKind::kPreempted, q, u, reason, "preempted");
}

void Scheduler::pack(StepCtx& c) {
  for (TierId t = 0; t < c.n_tiers; ++t) {
    c.packing = t;
    int64_t left = c.grant[size_t(t)];
    for (Candidate& cand : c.cands[size_t(t)]) {
      if (left <= 0) break;
      if (cand.skip) continue;
      left -= place(c, cand, std::min(cand.want, left), true);
    }
  }
  // Work conservation: tokens a tier could not use (KV, batch limits) go to whoever can,
  // in priority order, within caps for tiers that do not borrow. Floors are already met.
  c.packing = c.n_tiers;
  int64_t left = c.budget;
  for (int64_t p : c.planned) left -= p;
  for (TierId t = 0; t < c.n_tiers && left > 0; ++t) {
    const bool borrow = tiers_[size_t(t)].borrows();
    for (Candidate& cand : c.cands[size_t(t)]) {
      if (left <= 0) break;
      if (cand.skip || cand.planned >= cand.want) continue;
      const int64_t room = borrow ? kUnlimited : c.tok_cap[size_t(t)] - c.planned[size_t(t)];
      const int64_t n = std::min({cand.want - cand.planned, left, room});
      if (n <= 0) break;
      left -= place(c, cand, n, false);
    }
  }
}

// Latency tiers (burst_tokens > 0), in priority order, compute what they still want on
// top of the budget, up to their burst, while their tokens over the window (this plan
// included) stay within share_max of the budget of the window's steps: the cap of
// share_max x budget per step, enforced on average instead of in every step. A tier
// flooding the server spends that allowance in its per-step share and gets no burst;
// one at a low rate gets its prompts done in one step. (Budget, not tokens computed:
// a decode token costs a step far more than a prompt token, so counting computed tokens
// would shrink the allowance exactly when decodes make steps slow.) KV rules are those
// of the budget's tokens, without preemption: a burst never evicts others.
// With a measured step cost the burst also stops where the step would take longer than the
// tier's max wait (the step length in milliseconds on this machine, not only in tokens):
// one exclusive step never holds the tier's next request past its max wait.
void Scheduler::burst(StepCtx& c) {
  // The predicted time of what is planned so far.
  double planned_ns = cost_.fixed_ns;
  if (cost_.measured())
    for (const auto& tier : c.cands)
      for (const Candidate& cand : tier) {
        if (cand.skip || cand.planned <= 0) continue;
        planned_ns += cost_.tokens_ns(cand.planned, cand.q->n_computed);
        if (cand.q->n_computed + cand.planned == cand.q->n_known()) planned_ns += cost_.output_ns;
      }
  for (TierId t = 0; t < c.n_tiers; ++t) {
    const TierConfig& tc = tiers_[size_t(t)].config();
    if (tc.burst_tokens <= 0) continue;
    const double limit_ns = cost_.measured() && tc.max_queue_wait_ms > 0 ? double(tc.max_queue_wait_ms) * 1e6 : 1e30;
    // The most tokens of `cand` beyond what it has that keep the step within limit_ns.
    auto fits = [&](const Candidate& cand, int64_t n) {
      if (!cost_.measured()) return n;
      const int64_t ctx = cand.q->n_computed + cand.planned;
      int64_t lo = 0, hi = n;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (planned_ns + cost_.tokens_ns(mid, ctx) <= limit_ns) lo = mid;
        else hi = mid - 1;
      }
      return lo;
    };
    const int64_t allowance = share_units(tc.share_max, c.budget * int64_t(window_.size()));
    int64_t left = std::min(tc.burst_tokens, allowance - window_sum_[size_t(t)] - c.planned[size_t(t)]);
    // A promoted request's max wait is over: its burst does not wait for the allowance.
    int64_t promoted_left = tc.burst_tokens;
    for (Candidate& cand : c.cands[size_t(t)]) {
      if (cand.skip || cand.planned >= cand.want_burst) continue;
      int64_t& l = cand.q->promoted && promoted_left > left ? promoted_left : left;
      if (l <= 0) continue;
      const int64_t ctx = cand.q->n_computed + cand.planned;
      const int64_t n = place(c, cand, fits(cand, std::min(cand.want_burst - cand.planned, l)), false);
      if (n > 0 && cost_.measured()) planned_ns += cost_.tokens_ns(n, ctx);
      left -= n;
      promoted_left -= n;
    }
  }
}

// The cost model the floors are kept in: the measured step cost, else one unit per token
// (floors in tokens, as without a clock).
const StepCost& Scheduler::floor_cost() const {
  static const StepCost kPerToken = [] {
    StepCost u;
    u.token_ns = 1;
    return u;
  }();
  return cost_.measured() ? cost_ : kPerToken;
}

// What `n` more tokens of `cand` cost beyond what is planned for it: its tokens, and its
// output row when they complete what it knows.
double Scheduler::tokens_cost_ns(const Candidate& cand, int64_t n) const {
  const StepCost& k = floor_cost();
  const Req& q = *cand.q;
  const int64_t at = q.n_computed + cand.planned;
  return k.tokens_ns(n, at) + (at + n == q.n_known() ? k.output_ns : 0.0);
}

// Each tier's share of this step's time (its tokens' cost and its part of the fixed cost)
// against what its floor was owed: share_min of the step's time, or what its entitled
// tokens (min(floor, demand)) cost, whichever is less.
void Scheduler::record_window(const StepCtx& c) {
  const size_t n = size_t(c.n_tiers), w = window_.size();
  std::vector<int64_t>& slot = window_[window_pos_];
  std::vector<double> used(n, 0.0);
  double all = 0;
  for (size_t t = 0; t < n; ++t)
    for (const Candidate& cand : c.cands[t])
      if (!cand.skip && cand.planned > 0) {
        Candidate from_start = cand;
        from_start.planned = 0;
        used[t] += tokens_cost_ns(from_start, cand.planned);
      }
  for (double u : used) all += u;
  const double step_ns = floor_cost().fixed_ns + all;
  for (size_t t = 0; t < n; ++t) {
    window_sum_[t] += c.planned[t] - slot[t];
    slot[t] = c.planned[t];
    const int64_t got = all > 0 ? int64_t(used[t] + floor_cost().fixed_ns * used[t] / all) : 0;
    const int64_t owed = std::min(int64_t(tiers_[t].config().share_min * step_ns), c.entitled_ns[t]);
    window_got_sum_[t] += got - window_got_[window_pos_][t];
    window_got_[window_pos_][t] = got;
    window_owed_sum_[t] += owed - window_owed_[window_pos_][t];
    window_owed_[window_pos_][t] = owed;
  }
  n_exclusive_ += int32_t(c.exclusive) - int32_t(window_exclusive_[window_pos_]);
  window_exclusive_[window_pos_] = c.exclusive;
  window_pos_ = (window_pos_ + 1) % w;
}

// An interrupted step computed nothing: its tokens leave the window again, and what its
// tiers received with them (what their floors were owed stays: the step's time was spent).
void Scheduler::unrecord_window(TierId t, int64_t n_tokens) {
  const size_t w = window_.size();
  if (w == 0 || t < 0 || size_t(t) >= window_sum_.size()) return;
  const size_t last = (window_pos_ + w - 1) % w;
  window_[last][size_t(t)] -= n_tokens;
  window_sum_[size_t(t)] -= n_tokens;
  window_got_sum_[size_t(t)] -= window_got_[last][size_t(t)];
  window_got_[last][size_t(t)] = 0;
}

// Whether interrupting tier t may take a step of its own now: exclusive steps stay within
// share_max of the window's steps, and a bursting tier's tokens within its allowance.
bool Scheduler::may_run_exclusive(TierId t, int64_t budget) const {
  const TierConfig& tc = tiers_[size_t(t)].config();
  if (!tc.interrupt || window_.empty()) return false;
  const int64_t w = int64_t(window_.size());
  if (n_exclusive_ + 1 > share_units(tc.share_max, w)) return false;
  return tc.burst_tokens <= 0 || share_units(tc.share_max, budget * w) - window_sum_[size_t(t)] > 0;
}

// Every other tier with demand keeps its floor over the window with this step given to
// the interrupting tiers. Floors are shares of the machine's time: over the window a tier
// receives at least, per step, share_min of the step's time or what its entitled tokens
// (min(floor, demand)) cost, whichever is less (floor_cost(): the measured step cost, so
// that a tier whose demand is a few decode rows is not owed the floor's tokens it never
// asked for, and a long exclusive step owes more than a short one). This step counts as
// nothing received and its entitled tokens' whole cost owed (what it owes at most), in
// place of the plan that leaves the window.
bool Scheduler::floors_allow_exclusive(const StepCtx& c) const {
  for (TierId t = 0; t < c.n_tiers; ++t) {
    const size_t u = size_t(t);
    if (tiers_[u].config().interrupt || c.demand[u] == 0) continue;
    const int64_t got = window_got_sum_[u] - window_got_[window_pos_][u];
    const int64_t owed = window_owed_sum_[u] - window_owed_[window_pos_][u] + c.entitled_ns[u];
    if (got < owed) return false;
  }
  return true;
}

// 3b. An interrupting tier with prompt left (a new, resumed or partly computed prompt)
// takes the step alone: the other tiers' candidates sit this step out. Their floors hold
// over the window instead (may_run_exclusive bounds how many steps go this way).
//     A promoted request of an interrupting tier (its max wait is over) is what bounds how
//     long an admitted fast request waits behind the other tiers (wait_bound_ns): it gets
//     this step to itself, or it is told now. When the window's limits refuse the step
//     (the tier past its share, or another tier below its floor), its tier's
//     on_predicted_wait rule acts on it at once: downgraded or refused, explicitly, reason
//     queue_timeout. Only a tier whose rule is `admit` takes the step anyway, past the
//     limits (the operator's choice; the step says so: exclusive_forced).
void Scheduler::make_exclusive(StepCtx& c) {
  c.entitled.resize(size_t(c.n_tiers));
  c.entitled_ns.assign(size_t(c.n_tiers), 0);
  for (size_t t = 0; t < size_t(c.n_tiers); ++t) {
    c.entitled[t] = std::min(c.tok_floor[t], c.demand[t]);
    double ns = 0;
    int64_t left = c.entitled[t];
    for (const Candidate& cand : c.cands[t]) {
      if (left <= 0) break;
      const int64_t k = std::min(cand.want, left);
      ns += tokens_cost_ns(cand, k);
      left -= k;
    }
    c.entitled_ns[t] = int64_t(ns);
  }
  bool any = false, promoted = false;
  for (TierId t = 0; t < c.n_tiers; ++t) {
    if (!tiers_[size_t(t)].config().interrupt) continue;
    const bool allowed = may_run_exclusive(t, c.budget);
    for (const Candidate& cand : c.cands[size_t(t)]) {
      const bool prompt_left = cand.q->state == RequestState::kQueued || cand.q->remaining() > 1;
      if (!prompt_left) continue;
      any = any || allowed;
      promoted = promoted || cand.q->promoted;
    }
  }
  if (any && !floors_allow_exclusive(c)) any = false;
  bool forced = false;
  if (!any && promoted) {
    for (TierId t = 0; t < c.n_tiers; ++t) {
      const TierPolicy& p = tiers_[size_t(t)];
      if (!p.config().interrupt) continue;
      const Move m = p.at_predicted_wait();
      // Out of this step's candidates first (a refused request's Req is gone afterwards).
      std::vector<Req*> told;
      auto& cands = c.cands[size_t(t)];
      for (auto it = cands.begin(); it != cands.end();) {
        Req& q = *it->q;
        if (it->skip || !q.promoted || q.started || m.kind == Move::kStay) {
          forced = forced || (!it->skip && q.promoted && !q.started && m.kind == Move::kStay);
          ++it;
          continue;
        }
        c.demand[size_t(t)] -= it->want;
        told.push_back(&q);
        it = cands.erase(it);
      }
      for (Req* q : told) {
        const std::string why = "waited " + std::to_string((c.now_ns - q->enqueued_ns) / 1'000'000) + " ms on tier '" +
                                p.name() + "' (max " + std::to_string(p.config().max_queue_wait_ms) +
                                " ms) and the tier is past its share";
        if (m.kind == Move::kReject) {
          end(q->r.id, EventKind::kRejected, Reason::kQueueTimeout, why);
          continue;
        }
        dequeue(*q);
        q->promoted = false;
        enqueue(*q, m.tier, false, c.now_ns);
        emit(EventKind::kDowngraded, *q, t, Reason::kQueueTimeout,
             why + "; moved to tier '" + tiers_[size_t(m.tier)].name() + "'");
      }
    }
  }
  if (!any && !forced) return;
  c.exclusive = true;
  c.exclusive_forced = !any;
  for (TierId t = 0; t < c.n_tiers; ++t) {
    if (tiers_[size_t(t)].config().interrupt) continue;
    c.cands[size_t(t)].clear();
    c.demand[size_t(t)] = 0;
  }
}

// Nothing could be planned although there is demand: every block is held by requests
// that cannot advance. Preempt one running request so that the others can: the lowest
// tier's cheapest (least computed; the newest on ties), preferring requests with
// preemption budget left. When every budget is spent it still preempts (a late answer
// beats a failed one) unless the request is the only one holding KV: then nothing can
// ever make room for it and it fails with kv_exhausted.
void Scheduler::break_deadlock(StepCtx& c) {
  int64_t n_planned = 0, n_demand = 0;
  for (TierId t = 0; t < c.n_tiers; ++t) {
    n_planned += c.planned[size_t(t)];
    n_demand += c.demand[size_t(t)];
  }
  if (n_planned > 0 || n_demand == 0 || kv_in_use() == 0) return;
  int64_t n_holding = 0;
  for (const TierState& s : ts_)
    for (RequestId id : s.running) n_holding += reqs_.at(id).n_blocks > 0;
  Req* victim = nullptr;
  bool over_budget = false;
  for (int pass = 0; pass < 2 && !victim; ++pass) {
    for (TierId u = c.n_tiers - 1; u >= 0 && !victim; --u)
      for (auto it = ts_[size_t(u)].running.rbegin(); it != ts_[size_t(u)].running.rend(); ++it) {
        Req& v = reqs_.at(*it);
        if (v.n_blocks == 0 || (pass == 0 && v.n_preemptions >= v.budget)) continue;
        if (!victim || v.n_computed < victim->n_computed) victim = &v;
      }
    over_budget = pass == 1;
  }
  if (!victim) return;
  if (!over_budget || n_holding > 1) {
    preempt(c, *victim, Reason::kKvPressure);
    events_.back().text = over_budget ? "preempted past its budget: no request could advance with the KV blocks left"
                                      : "preempted: no request could advance with the KV blocks left";
  } else {
    end(victim->r.id, EventKind::kFailed, Reason::kKvExhausted,
        "the only request holding KV cannot advance: the cache cannot hold it");
  }
}

void Scheduler::finish_plan(StepCtx& c, Plan& plan) {
  plan.preempt = std::move(c.preempted);
  plan.tiers.resize(size_t(c.n_tiers));
  for (TierId t = 0; t < c.n_tiers; ++t) {
    TierStep& ts = plan.tiers[size_t(t)];
    const bool spec = tiers_[size_t(t)].config().speculative;
    int32_t n_new = 0;
    int64_t demand = 0;  // without the requests preempted during this plan
    for (const Candidate& cand : c.cands[size_t(t)]) {
      if (!cand.skip) demand += cand.want;
      if (cand.skip || cand.planned <= 0) continue;
      const Req& q = *cand.q;
      PlanEntry e;
      e.id = q.r.id;
      e.tier = t;
      e.kind = q.state == RequestState::kRunning ? EntryKind::kContinue : q.started ? EntryKind::kResume : EntryKind::kStart;
      e.pos0 = q.n_computed;
      e.n_tokens = cand.planned;
      e.n_outputs = q.n_computed + cand.planned == q.n_known() ? 1 : 0;
      e.speculative = spec;
      const std::span<const int32_t> blocks = kv_.blocks(q.r.id);
      e.blocks.assign(blocks.begin(), blocks.end());
      plan.entries.push_back(e);
      ++ts.n_planned;
      if (q.state == RequestState::kQueued) ++n_new;
    }
    ts.tokens_demand = std::min(demand, c.budget);
    ts.tokens_floor = c.tok_floor[size_t(t)];
    ts.tokens_cap = c.tok_cap[size_t(t)];
    ts.tokens_planned = c.planned[size_t(t)];
    ts.kv_limited = c.kv_limited[size_t(t)];
    ts.kv_blocks_held = ts_[size_t(t)].kv_held;
    ts.kv_blocks_floor = int32_t(c.kv_floor[size_t(t)]);
    ts.n_queued = int32_t(ts_[size_t(t)].queue->size()) - n_new;
    ts.n_running = int32_t(ts_[size_t(t)].running.size()) + n_new;
    ts_[size_t(t)].backlogged = ts.n_queued > 0;
  }
  // A higher tier left waiting below its cap while a lower one got more than its floor.
  for (TierId t = 0; t < c.n_tiers; ++t) {
    const TierStep& hi = plan.tiers[size_t(t)];
    const auto& ct = c.cands[size_t(t)];
    const bool waiting =
        !hi.kv_limited && std::any_of(ct.begin(), ct.end(), [](const Candidate& x) { return !x.skip && x.planned == 0; });
    // Borrowing takes only idle capacity, so a borrowing tier at its cap is no inversion.
    const bool below_cap = hi.tokens_planned < hi.tokens_cap;
    if (!waiting || !below_cap) continue;
    for (TierId u = t + 1; u < c.n_tiers; ++u)
      if (plan.tiers[size_t(u)].tokens_planned > plan.tiers[size_t(u)].tokens_floor) ++plan.n_priority_inversions;
  }
  for (const kv::BlockCopy& cp : c.copies) plan.copies.emplace_back(cp.src, cp.dst);
  plan.events = std::move(events_);
  events_.clear();
}

Plan Scheduler::schedule(int64_t now_ns) {
  now_ns = std::max(now_ns, last_now_ns_);
  observe_service_rates(now_ns);
  last_now_ns_ = now_ns;
  apply_timeouts(now_ns);

  StepCtx c;
  c.now_ns = now_ns;
  c.budget = cfg_.step_token_budget;
  c.n_tiers = n_tiers();
  const size_t n = size_t(c.n_tiers);
  c.cands.resize(n);
  c.demand.assign(n, 0);
  c.tok_floor.assign(n, 0);
  c.tok_cap.assign(n, 0);
  c.planned.assign(n, 0);
  c.kv_held.assign(n, 0);
  c.kv_floor.assign(n, 0);
  c.kv_cap.assign(n, 0);
  c.kv_reserve.assign(n, 0);
  c.kv_limited.assign(n, false);
  if (window_.size() != size_t(cfg_.share_window_steps)) {
    window_.assign(size_t(cfg_.share_window_steps), std::vector<int64_t>(n, 0));
    window_sum_.assign(n, 0);
    window_got_.assign(size_t(cfg_.share_window_steps), std::vector<int64_t>(n, 0));
    window_got_sum_.assign(n, 0);
    window_owed_.assign(size_t(cfg_.share_window_steps), std::vector<int64_t>(n, 0));
    window_owed_sum_.assign(n, 0);
    window_exclusive_.assign(size_t(cfg_.share_window_steps), false);
    n_exclusive_ = 0;
    window_pos_ = 0;
  }
  collect_candidates(c);
  make_exclusive(c);
  for (const TierState& ts : ts_)
    for (RequestId id : ts.running) {
      const Req& r = reqs_.at(id);
      if (r.n_blocks == 0) continue;
      const int64_t need = reserve_need(r, 0, 0);
      c.reserve_of.emplace(&r, need);
      c.reserve_total += need;
    }

  std::vector<ShareInput> in(n);
  for (size_t t = 0; t < n; ++t) in[t] = {c.demand[t], c.tok_floor[t], c.tok_cap[t], tiers_[t].borrows()};
  c.grant = allocate_shares(c.budget, in);

  // KV: floors of tiers below them, for what their granted tokens would take, are kept
  // free while higher tiers are packed.
  for (size_t t = 0; t < n; ++t) {
    c.kv_held[t] = ts_[t].kv_held;
    c.kv_floor[t] = tiers_[t].floor_of(kv_.n_blocks());
    c.kv_cap[t] = tiers_[t].cap_of(kv_.n_blocks());
    int64_t need = 0, left = c.grant[t];
    for (const Candidate& cand : c.cands[t]) {
      if (left <= 0) break;
      const int64_t k = std::min(cand.want, left);
      need += kv::blocks_to_append(cand.q->n_computed, cand.q->n_blocks, k, cfg_.kv_block_size);
      left -= k;
    }
    c.kv_reserve[t] = std::clamp<int64_t>(c.kv_floor[t] - c.kv_held[t], 0, need);
  }

  pack(c);
  burst(c);
  break_deadlock(c);
  record_window(c);

  Plan plan;
  plan.step = ++step_;
  plan.now_ns = now_ns;
  plan.token_budget = c.budget;
  finish_plan(c, plan);
  plan.exclusive = c.exclusive;
  plan.exclusive_forced = c.exclusive_forced;
  // The interrupting tiers past their share with prompt work left: what they compute until
  // the next plan is their rate at their share (capped_rate, for predicted waits).
  for (TierId t = 0; t < c.n_tiers; ++t) {
    TierState& s = ts_[size_t(t)];
    s.capped = false;
    if (!tiers_[size_t(t)].config().interrupt || may_run_exclusive(t, c.budget)) continue;
    s.capped = prompt_work_ahead(t) > 0;
  }
  if (!c.exclusive) {
    bool interrupter_prompt = false, may_interrupt = false;
    for (const PlanEntry& e : plan.entries)
      if (tiers_[size_t(e.tier)].config().interrupt && (e.n_tokens > 1 || e.kind != EntryKind::kContinue))
        interrupter_prompt = true;
    for (TierId t = 0; t < c.n_tiers; ++t) may_interrupt = may_interrupt || may_run_exclusive(t, c.budget);
    plan.interruptible = may_interrupt && !interrupter_prompt && !plan.entries.empty();
  }
  return plan;
}

}  // namespace ts::sched
