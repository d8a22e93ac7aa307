// Scheduler: admission, cancellation, results, queries. The per-step planning is in
// plan_step.cc.
#include "sched/scheduler.h"

#include <algorithm>
#include <span>
#include <string>
#include <unordered_map>

#include "core/check.h"
#include "kv/blocks.h"
#include "sched/shares.h"

namespace ts::sched {

Result<std::unique_ptr<Scheduler>> Scheduler::create(const SchedConfig& cfg) {
  TS_RETURN_IF_ERROR(validate_config(cfg));
  if (cfg.step_token_budget < 1)
    return invalid_argument("bad_limit: step_token_budget 0 (derived) must be resolved before the scheduler starts");
  for (const TierConfig& t : cfg.tiers)
    if (t.burst_tokens < 0)
      return invalid_argument("bad_limit: tier '" + t.name + "': burst_tokens -1 (derived) must be resolved first");
  return std::unique_ptr<Scheduler>(new Scheduler(cfg));
}

namespace {
kv::KvOptions kv_options(const SchedConfig& cfg) {
  kv::KvOptions o;
  o.n_blocks = cfg.kv_blocks_total;
  o.block_size = cfg.kv_block_size;
  o.prefix_cache = cfg.prefix_cache;
  o.share_prefixes = cfg.share_prefixes;
  return o;
}
}  // namespace

Scheduler::Scheduler(const SchedConfig& cfg) : cfg_(cfg), tiers_(make_tier_policies(cfg)), kv_(kv_options(cfg)) {
  const int64_t window_ns = cfg.service_rate_window_ms * 1'000'000;
  for (const TierPolicy& t : tiers_)
    ts_.push_back(TierState{t.make_queue(), {}, 0, 0, ServiceRate(window_ns), 0, false, ServiceRate(window_ns), 0, false});
}

std::optional<TierId> Scheduler::find_tier(std::string_view name) const {
  for (const TierPolicy& t : tiers_)
    if (t.name() == name) return t.id();
  return std::nullopt;
}

int64_t Scheduler::prompt_work_ahead(TierId t) const {
  const TierState& s = ts_[size_t(t)];
  int64_t ahead = s.queued_tokens;
  for (RequestId id : s.running) {
    const Req& q = reqs_.at(id);
    if (q.remaining() > 1) ahead += q.remaining() - 1;
  }
  return ahead;
}

std::optional<int64_t> Scheduler::predicted_wait_ns(TierId t, int64_t n_prompt) const {
  const TierPolicy& p = tiers_[size_t(t)];
  const TierState& s = ts_[size_t(t)];
  if (!p.config().interrupt || !cost_.measured()) return s.rate.wait_ns(int64_t(s.queue->size()));
  n_prompt = std::max<int64_t>(n_prompt, 1);
  // The tier's prompt work ahead and this prompt, at full speed (the step cost model).
  double work_ns = cost_.tokens_ns(n_prompt, 0);
  const double own_ns = work_ns;
  int64_t work_tokens = n_prompt;
  for (const QueueItem& it : s.queue->items()) {
    const Req& q = reqs_.at(it.id);
    work_ns += cost_.tokens_ns(q.remaining(), q.n_computed);
    work_tokens += q.remaining();
  }
  for (RequestId id : s.running) {
    const Req& q = reqs_.at(id);
    if (q.remaining() <= 1) continue;
    work_ns += cost_.tokens_ns(q.remaining() - 1, q.n_computed);
    work_tokens += q.remaining() - 1;
  }
  // What the tier may still compute at full speed: its allowance left in the window (a
  // bursting tier's share of the window's budget), while exclusive steps are left.
  const TierConfig& tc = p.config();
  const int64_t budget = cfg_.step_token_budget;
  const int64_t w = window_.empty() ? cfg_.share_window_steps : int64_t(window_.size());
  const int64_t sum = window_sum_.empty() ? 0 : window_sum_[size_t(t)];
  int64_t full = 0;
  if (n_exclusive_ < share_units(tc.share_max, w))
    full = tc.burst_tokens > 0 ? std::max<int64_t>(0, share_units(tc.share_max, budget * w) - sum)
                               : (share_units(tc.share_max, w) - n_exclusive_) * budget;
  const double f = std::min(1.0, double(full) / double(work_tokens));
  // Beyond it, the rate at its share: measured while the tier was capped, else its share
  // of the full speed.
  double at_share_ns = (1.0 - f) * work_ns / std::max(tc.share_max, 1e-3);
  if (auto r = s.capped_rate.starts_per_s(); r && *r > 1e-9)
    at_share_ns = std::max((1.0 - f) * work_ns, (1.0 - f) * double(work_tokens) / *r * 1e9);
  const double wait = cost_.segment_ns(budget, 0) + f * work_ns + at_share_ns - own_ns;
  return int64_t(std::max(0.0, wait));
}

std::optional<int64_t> Scheduler::wait_bound_ns(TierId t) const {
  const TierPolicy& p = tiers_[size_t(t)];
  if (!p.config().interrupt || !cost_.measured() || p.max_wait_ns() <= 0) return std::nullopt;
  int64_t rows = 0;  // the decode rows of the other tiers a step may carry
  for (const TierPolicy& u : tiers_)
    if (!u.config().interrupt) rows += u.config().max_batch;
  const int64_t budget = cfg_.step_token_budget;
  // After its max wait the request is promoted and the next step is its own; the step in
  // flight then is a step of the budget (other tiers), or one of its own tier's exclusive
  // steps, which burst() keeps within the max wait.
  return p.max_wait_ns() + std::max(p.max_wait_ns(), int64_t(cost_.step_ns(budget, std::min(rows, budget))));
}

std::optional<RequestInfo> Scheduler::info(RequestId id) const {
  auto it = reqs_.find(id);
  if (it == reqs_.end()) return std::nullopt;
  const Req& q = it->second;
  return RequestInfo{q.requested,     q.served,     q.state,        q.started,       q.promoted,
                     q.n_computed,    q.n_generated, q.n_blocks,     q.n_preemptions, q.arrival_ns,
                     q.steps_behind,  q.steps_behind_late};
}

int32_t Scheduler::kv_in_use() const {
  int32_t n = 0;
  for (const TierState& s : ts_) n += s.kv_held;
  return n;
}

// --- queue bookkeeping ------------------------------------------------------------------

void Scheduler::enqueue(Req& q, TierId t, bool at_head, int64_t now_ns) {
  q.served = t;
  q.state = RequestState::kQueued;
  q.enqueued_ns = now_ns;
  q.queued_tokens = q.r.n_prompt_tokens;
  TierState& s = ts_[size_t(t)];
  s.queue->push(QueueItem{q.r.id, q.r.n_prompt_tokens, at_head});
  s.queued_tokens += q.queued_tokens;
}

void Scheduler::dequeue(Req& q) {
  TierState& s = ts_[size_t(q.served)];
  TS_CHECK(s.queue->remove(q.r.id));
  s.queued_tokens -= q.queued_tokens;
  q.queued_tokens = 0;
}

void Scheduler::emit(EventKind kind, const Req& q, TierId from, Reason reason, std::string text) {
  events_.push_back(Event{kind, q.r.id, from, q.served, reason, std::move(text)});
}

void Scheduler::end(RequestId id, EventKind kind, Reason reason, std::string text) {
  auto it = reqs_.find(id);
  TS_CHECK(it != reqs_.end());
  Req& q = it->second;
  TierState& s = ts_[size_t(q.served)];
  if (q.state == RequestState::kQueued) {
    dequeue(q);
  } else {
    auto r = std::find(s.running.begin(), s.running.end(), id);
    TS_CHECK(r != s.running.end());
    s.running.erase(r);
    s.kv_held -= q.n_blocks;
  }
  kv_.remove(id);  // its blocks (and any reservation) go back; full ones stay cached
  emit(kind, q, q.served, reason, std::move(text));
  reqs_.erase(it);
}

// --- admission --------------------------------------------------------------------------

namespace {

Decision reject(const Request& r, TierId served, Reason reason, std::string text, int64_t retry_after_ms) {
  Decision d;
  d.accepted = false;
  d.tier_requested = r.tier;
  d.tier_served = served;
  d.reason = reason;
  d.text = std::move(text);
  d.retry_after_ms = std::max<int64_t>(retry_after_ms, 1);
  return d;
}

std::string ms(int64_t ns) { return std::to_string(ns / 1'000'000) + " ms"; }

}  // namespace

Decision Scheduler::submit(const Request& r, int64_t now_ns) {
  if (r.tier < 0 || r.tier >= n_tiers())
    return reject(r, 0, Reason::kInvalidRequest, "unknown tier " + std::to_string(r.tier), 0);
  if (r.n_prompt_tokens < 1 || r.max_output_tokens < 1)
    return reject(r, r.tier, Reason::kInvalidRequest, "empty prompt or max_output_tokens < 1", 0);
  if (reqs_.count(r.id)) return reject(r, r.tier, Reason::kInvalidRequest, "request id already in use", 0);
  if (!r.tokens.empty() && int64_t(r.tokens.size()) != r.n_prompt_tokens)
    return reject(r, r.tier, Reason::kInvalidRequest,
                  std::to_string(r.tokens.size()) + " token ids for a prompt of " + std::to_string(r.n_prompt_tokens), 0);
  const int64_t blocks = kv::blocks_for_tokens(r.n_prompt_tokens + r.max_output_tokens, cfg_.kv_block_size);
  if (blocks > kv_.n_blocks())
    return reject(r, r.tier, Reason::kTooLarge,
                  "prompt + max_output_tokens need " + std::to_string(blocks) + " KV blocks of " +
                      std::to_string(kv_.n_blocks()),
                  0);

  // Walk down the tier's on_timeout rule while the tier cannot take the request.
  TierId t = r.tier;
  Reason why = Reason::kNone;
  std::string text;
  for (;;) {
    const TierPolicy& p = tiers_[size_t(t)];
    const TierState& s = ts_[size_t(t)];
    std::optional<Move> move;
    if (p.queue_full(int64_t(s.queue->size()), s.queued_tokens, r.n_prompt_tokens)) {
      why = Reason::kQueueFull;
      text = "tier '" + p.name() + "' queue is full (" + std::to_string(s.queue->size()) + " requests, " +
             std::to_string(s.queued_tokens) + " tokens)";
      move = p.timeout_rule().at_admission(t);
      if (move->kind == Move::kStay) move = Move{Move::kReject, 0};  // a full queue takes nobody
    } else if (auto wait = predicted_wait_ns(t, r.n_prompt_tokens); wait && p.max_wait_ns() > 0 && *wait > p.max_wait_ns()) {
      why = Reason::kPredictedWait;
      text = "predicted wait " + ms(*wait) + " on tier '" + p.name() + "' exceeds its " + ms(p.max_wait_ns());
      move = p.at_predicted_wait();
      if (move->kind == Move::kStay) break;  // admitted anyway (on_predicted_wait: admit, or promotion rescues it)
    } else {
      break;
    }
    if (move->kind == Move::kToTier && move->tier > t) {
      t = move->tier;  // downgrades go strictly down (validated), so this ends
      continue;
    }
    const int64_t retry = predicted_wait_ns(t, r.n_prompt_tokens).value_or(1'000'000'000) / 1'000'000;
    return reject(r, t, why, text, std::min<int64_t>(retry, 60'000));
  }

  if (!shed_for(t, r.n_prompt_tokens))
    return reject(r, t, Reason::kOverloaded, "server queue limit reached and no lower tier to shed", 1000);

  Req q;
  q.r = r;
  q.requested = r.tier;
  q.arrival_ns = now_ns;
  q.budget = r.preemption_budget >= 0 ? r.preemption_budget : tiers_[size_t(t)].config().preemption_budget;
  q.has_ids = !r.tokens.empty();
  Req& stored = reqs_.emplace(r.id, q).first->second;
  kv_.add(r.id, r.isolation_key, q.has_ids);
  enqueue(stored, t, false, now_ns);

  Decision d;
  d.accepted = true;
  d.tier_requested = r.tier;
  d.tier_served = t;
  if (t != r.tier) {
    d.reason = why;
    d.text = text + "; downgraded to '" + tiers_[size_t(t)].name() + "'";
  }
  return d;
}

// Global bound: make room for one request of n_prompt tokens on tier t by rejecting
// waiting (never started) requests of lower tiers, lowest tier and newest first. Sheds
// nothing unless that makes enough room.
bool Scheduler::shed_for(TierId t, int64_t n_prompt) {
  int64_t n_req = 0, n_tok = 0;
  for (const TierState& s : ts_) {
    n_req += int64_t(s.queue->size());
    n_tok += s.queued_tokens;
  }
  int64_t excess_req = n_req + 1 - cfg_.max_queued_requests_total;
  int64_t excess_tok = n_tok + n_prompt - cfg_.max_queued_tokens_total;
  if (excess_req <= 0 && excess_tok <= 0) return true;
  std::vector<RequestId> victims;
  for (TierId u = n_tiers() - 1; u > t && (excess_req > 0 || excess_tok > 0); --u) {
    const auto& items = ts_[size_t(u)].queue->items();
    for (auto it = items.rbegin(); it != items.rend() && (excess_req > 0 || excess_tok > 0); ++it) {
      const Req& v = reqs_.at(it->id);
      if (v.started) continue;
      victims.push_back(it->id);
      excess_req -= 1;
      excess_tok -= v.queued_tokens;
    }
  }
  if (excess_req > 0 || excess_tok > 0) return false;
  for (RequestId id : victims)
    end(id, EventKind::kRejected, Reason::kShedForHigherTier,
        "shed under global overload for a request of tier '" + tiers_[size_t(t)].name() + "'");
  return true;
}

Status Scheduler::cancel(RequestId id) {
  if (!reqs_.count(id)) return not_found("request " + std::to_string(id) + " is not active");
  end(id, EventKind::kCancelled, Reason::kCancelled, "cancelled");
  return Status::ok();
}

// --- results ----------------------------------------------------------------------------

Status Scheduler::update(const Plan& plan, const StepUpdate& u) {
  std::unordered_map<RequestId, const PlanEntry*> planned;
  for (const PlanEntry& e : plan.entries) planned.emplace(e.id, &e);
  // A step that ran with other tiers' work: every waiting request of an interrupting tier
  // that was not in it waited behind it (promoted ones: after their max wait).
  bool ran = false, others = false;
  for (const RequestResult& rr : u.requests) ran = ran || rr.outcome == StepOutcome::kOk;
  for (const PlanEntry& e : plan.entries) others = others || !tiers_[size_t(e.tier)].config().interrupt;
  if (ran && others)
    for (TierId t = 0; t < n_tiers(); ++t) {
      if (!tiers_[size_t(t)].config().interrupt) continue;
      for (const QueueItem& it : ts_[size_t(t)].queue->items()) {
        Req& q = reqs_.at(it.id);
        if (q.started || planned.count(q.r.id) || q.arrival_ns > plan.now_ns) continue;
        ++q.steps_behind;
        if (q.promoted) ++q.steps_behind_late;
      }
    }
  std::string unknown;
  std::unordered_map<RequestId, const RequestResult*> got;
  for (const RequestResult& rr : u.requests) {
    if (!planned.count(rr.id)) {
      unknown += (unknown.empty() ? "" : ", ") + std::to_string(rr.id);
      continue;
    }
    got.emplace(rr.id, &rr);
  }
  for (const PlanEntry& e : plan.entries) {
    auto it = reqs_.find(e.id);
    if (it == reqs_.end()) continue;  // cancelled meanwhile (its blocks went back then)
    Req& q = it->second;
    TierState& s = ts_[size_t(q.served)];
    auto g = got.find(e.id);
    const StepOutcome outcome = g == got.end() ? StepOutcome::kInterrupted : g->second->outcome;
    switch (outcome) {
      case StepOutcome::kOk: {
        const RequestResult& rr = *g->second;
        // Prompt work (a decode is one token of a running request): the capped rate is the
        // rate at which the tier gets through prompts at its share.
        if (e.kind != EntryKind::kContinue || e.n_tokens > 1) s.n_tokens += e.n_tokens;
        if (q.state == RequestState::kQueued) {
          dequeue(q);
          q.state = RequestState::kRunning;
          s.running.push_back(q.r.id);
          if (!q.started) ++s.n_started;
          q.started = true;
        }
        // The tokens kept: those planned, or after speculative verification the first
        // token and the drafts that matched (within the entry's blocks).
        const int64_t room = int64_t(e.blocks.size()) * cfg_.kv_block_size - e.pos0;
        const int64_t n = std::clamp<int64_t>(rr.n_computed - e.pos0, 0, room);
        if (q.has_ids && int64_t(rr.sampled.size()) == int64_t(rr.n_sampled)) {
          q.r.tokens.insert(q.r.tokens.end(), rr.sampled.begin(), rr.sampled.end());
        } else if (q.has_ids) {
          q.has_ids = false;  // ids unknown from here on: counted only
        }
        q.n_generated += rr.n_sampled;
        if (q.has_ids && int64_t(q.r.tokens.size()) >= e.pos0 + n)
          kv_.commit(e.id, std::span<const int32_t>(q.r.tokens).subspan(size_t(e.pos0), size_t(n)), n);
        else
          kv_.commit(e.id, {}, n);
        q.n_computed = e.pos0 + n;
        const int32_t held = kv_.n_seq_blocks(e.id);
        s.kv_held += held - q.n_blocks;
        q.n_blocks = held;
        if (rr.finished || q.n_generated >= q.r.max_output_tokens) end(q.r.id, EventKind::kFinished, Reason::kNone, "finished");
        break;
      }
      case StepOutcome::kInterrupted:
        if (g != got.end()) unrecord_window(e.tier, e.n_tokens);  // not computed after all
        if (q.state == RequestState::kQueued) {
          // A start or resume that did not run holds nothing: its prefix goes back too.
          kv_.free(e.id);
          q.n_computed = 0;
        } else {
          kv_.release_unused(e.id);
          const int32_t held = kv_.n_seq_blocks(e.id);
          s.kv_held += held - q.n_blocks;
          q.n_blocks = held;
        }
        break;
      case StepOutcome::kInvalid:
        end(q.r.id, EventKind::kFailed, Reason::kEngineError, "engine refused the step");
        break;
    }
  }
  if (!unknown.empty()) return invalid_argument("results for requests not in the plan: " + unknown);
  return Status::ok();
}

}  // namespace ts::sched
