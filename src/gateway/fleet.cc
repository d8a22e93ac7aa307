#include "gateway/fleet.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/check.h"

namespace ts::gateway {

std::string_view refusal_code(Refusal r) {
  switch (r) {
    case Refusal::kQueueFull: return "queue_full";
    case Refusal::kQueueTimeout: return "queue_timeout";
    case Refusal::kNoHealthyWorker: return "no_healthy_worker";
    case Refusal::kCancelled: return "cancelled";
  }
  return "error";
}

int refusal_status(Refusal r) {
  switch (r) {
    case Refusal::kQueueFull:
    case Refusal::kQueueTimeout: return 429;
    case Refusal::kNoHealthyWorker: return 503;
    case Refusal::kCancelled: return 499;
  }
  return 500;
}

Fleet::Fleet(std::vector<std::string> pools, std::vector<FleetTier> tiers, std::vector<FleetWorker> workers, int n_models,
             const Clock& clock)
    : pools_(std::move(pools)), tiers_(std::move(tiers)), workers_(std::move(workers)), n_models_(std::max(1, n_models)), clock_(clock) {
  lines_.resize(tiers_.size() * size_t(n_models_));
  ws_.resize(workers_.size());
  for (auto& w : ws_) w.by_tier.assign(tiers_.size(), 0);
}

bool Fleet::owns(int tier, int pool) const {
  const auto& p = tiers_[size_t(tier)].pools;
  return std::find(p.begin(), p.end(), pool) != p.end();
}

// Shares, caps and demand are per pool and model: a request can only be placed on workers
// of its model, so the slots of other models' workers in the same pool are not its share.

// Whether a tier other than `except_tier` that uses `pool` has a request for `model` waiting.
bool Fleet::pool_has_owner_demand(int pool, int except_tier, int model) const {
  for (int t = 0; t < int(tiers_.size()); ++t) {
    if (t == except_tier || !owns(t, pool)) continue;
    if (!lines_[size_t(t) * size_t(n_models_) + size_t(model)].empty()) return true;
  }
  return false;
}

int32_t Fleet::capacity(int pool, int model) const {
  int32_t c = 0;
  for (size_t w = 0; w < workers_.size(); ++w)
    if (workers_[w].pool == pool && workers_[w].model == model && ws_[w].load.up) c += workers_[w].max_inflight;
  return c;
}

int32_t Fleet::tier_inflight(int tier, int pool, int model) const {
  int32_t n = 0;
  for (size_t w = 0; w < workers_.size(); ++w)
    if (workers_[w].pool == pool && workers_[w].model == model) n += ws_[w].by_tier[size_t(tier)];
  return n;
}

// A floor is whole slots, rounded down (a small epsilon for shares like 0.3 x 10): it never
// claims a slot it is not owed, so in a pool of one slot there is no floor, only the tier
// order and the max waits (a floor of half a slot cannot be kept slot by slot).
int32_t Fleet::floor_slots(double share, int32_t cap) { return int32_t(std::floor(share * double(cap) + 1e-9)); }

double Fleet::score(int w) const {
  const WorkerState& s = ws_[size_t(w)];
  const double busy = std::max(double(s.inflight), s.load.running + s.load.waiting);
  return busy / double(std::max(1, workers_[size_t(w)].max_inflight)) + s.load.kv_usage;
}

bool Fleet::can_ever_serve(const Ticket& t) const {
  const FleetTier& tier = tiers_[size_t(t.tier)];
  for (size_t w = 0; w < workers_.size(); ++w) {
    if (!ws_[w].load.up) continue;
    if (workers_[w].model != t.model && workers_[w].model != t.fallback_model) continue;
    const int p = workers_[w].pool;
    const bool in_pools = std::find(tier.pools.begin(), tier.pools.end(), p) != tier.pools.end();
    const bool in_borrow = workers_[w].honours_priority && std::find(tier.borrow.begin(), tier.borrow.end(), p) != tier.borrow.end();
    if (in_pools || in_borrow) return true;
  }
  return false;
}

int Fleet::pick(const Queued& q, int tier, int pool, int model, bool borrowing) const {
  // A retry avoids the worker that failed it while another one that is up serves the model.
  int exclude = q.t.exclude_worker;
  if (exclude >= 0) {
    bool other = false;
    for (size_t w = 0; w < workers_.size(); ++w)
      other = other || (int(w) != exclude && ws_[w].load.up && (workers_[w].model == q.t.model || workers_[w].model == q.t.fallback_model));
    if (!other) exclude = -1;
  }
  // Ties (idle workers, say) go round: the scan starts one further at every placement.
  int best = -1;
  double best_score = 0;
  for (size_t k = 0; k < workers_.size(); ++k) {
    const size_t w = (rotation_ + k) % workers_.size();
    const FleetWorker& fw = workers_[w];
    const WorkerState& s = ws_[w];
    if (fw.pool != pool || fw.model != model || !s.load.up || int(w) == exclude) continue;
    if (borrowing) {
      if (!fw.honours_priority) continue;
      bool owner_busy = false;
      for (int t = 0; t < int(tiers_.size()); ++t) owner_busy = owner_busy || (owns(t, pool) && s.by_tier[size_t(t)] > 0);
      if (owner_busy || s.inflight >= fw.max_inflight) continue;
    } else {
      // An owner does not count what others borrowed here (the worker puts it first).
      const int32_t counted = fw.honours_priority ? s.inflight - s.borrowed : s.inflight;
      if (counted >= fw.max_inflight || s.inflight >= 2 * fw.max_inflight) continue;
    }
    const double sc = score(int(w));
    if (best < 0 || sc < best_score) best = int(w), best_score = sc;
  }
  return best;
}

bool Fleet::try_place(Queued& q, int tier, Actions& out) {
  const FleetTier& ft = tiers_[size_t(tier)];
  // A pool after the first is a fallback only when an earlier one has workers for the model
  // (a fleet without a dedicated pool serves the fast tier on the shared one as its own).
  auto configured = [&](int pool, int model) {
    for (const FleetWorker& fw : workers_)
      if (fw.pool == pool && fw.model == model) return true;
    return false;
  };
  auto placed = [](int worker, int pool, bool pool_fallback, bool borrowed, bool model_fallback) {
    Placement pl;
    pl.worker = worker;
    pl.pool = pool;
    pl.pool_fallback = pool_fallback;
    pl.borrowed = borrowed;
    pl.model_fallback = model_fallback;
    return pl;
  };
  auto attempt = [&](int model, bool model_fallback) {
    bool earlier = false;
    for (size_t i = 0; i < ft.pools.size(); ++i) {
      const int p = ft.pools[i];
      const bool fallback = earlier;
      earlier = earlier || configured(p, model);
      const int32_t cap = capacity(p, model);
      if (cap == 0) continue;
      // The cap holds while another tier that uses this pool waits; a promoted ticket's
      // wait is over and it goes past it.
      if (!q.promoted && ft.share_max < 1 && tier_inflight(tier, p, model) >= int32_t(std::ceil(ft.share_max * cap)) &&
          (ft.hard_cap || pool_has_owner_demand(p, tier, model)))
        continue;
      if (const int w = pick(q, tier, p, model, false); w >= 0) return placed(w, p, fallback, false, model_fallback);
    }
    for (int p : ft.borrow) {
      if (pool_has_owner_demand(p, tier, model)) continue;
      if (const int w = pick(q, tier, p, model, true); w >= 0) return placed(w, p, false, true, model_fallback);
    }
    return Placement{};
  };
  Placement pl = attempt(q.t.model, false);
  if (pl.worker < 0 && q.t.fallback_model >= 0) pl = attempt(q.t.fallback_model, true);
  if (pl.worker < 0) return false;
  const int64_t now = clock_.now_ns();
  pl.ticket = q.id;
  pl.tier = tier;
  pl.model = workers_[size_t(pl.worker)].model;
  pl.promoted = q.promoted;
  pl.queue_ns = now - q.enqueued_ns;
  WorkerState& s = ws_[size_t(pl.worker)];
  ++s.inflight;
  s.borrowed += pl.borrowed;
  ++s.by_tier[size_t(tier)];
  running_[q.id] = Running{pl.worker, tier, pl.pool, pl.borrowed};
  ++rotation_;
  out.push_back([cb = std::move(q.t.on_start), pl] {
    if (cb) cb(pl);
  });
  return true;
}

void Fleet::place_all(Actions& out) {
  for (;;) {
    // The heads of the lines, in placement order.
    struct Head {
      int cls, tier, promoted;
      int64_t seq;
      size_t line;
    };
    std::vector<Head> heads;
    for (int t = 0; t < int(tiers_.size()); ++t) {
      const FleetTier& ft = tiers_[size_t(t)];
      for (int m = 0; m < n_models_; ++m) {
        const size_t li = size_t(t) * size_t(n_models_) + size_t(m);
        if (lines_[li].empty()) continue;
        const bool below_floor = ft.share_min > 0 && !ft.pools.empty() &&
                                 tier_inflight(t, ft.pools[0], m) < floor_slots(ft.share_min, capacity(ft.pools[0], m));
        const Queued& q = lines_[li].front();
        heads.push_back({below_floor ? 0 : 1, t, q.promoted ? 0 : 1, int64_t(q.id), li});
      }
    }
    if (heads.empty()) return;
    std::sort(heads.begin(), heads.end(), [](const Head& a, const Head& b) {
      return std::tie(a.cls, a.tier, a.promoted, a.seq) < std::tie(b.cls, b.tier, b.promoted, b.seq);
    });
    bool placed = false;
    for (const Head& h : heads) {
      Queued& q = lines_[h.line].front();
      if (try_place(q, h.tier, out)) {
        lines_[h.line].pop_front();
        placed = true;
        break;  // capacities changed: recompute the order
      }
    }
    if (!placed) return;
  }
}

void Fleet::refuse_unservable(Actions& out) {
  for (auto& line : lines_)
    for (auto it = line.begin(); it != line.end();) {
      if (can_ever_serve(it->t)) {
        ++it;
        continue;
      }
      out.push_back([cb = std::move(it->t.on_refused)] {
        if (cb) cb(Refusal::kNoHealthyWorker, "no healthy worker serves this model for this tier");
      });
      it = line.erase(it);
    }
}

Fleet::Submitted Fleet::submit(Ticket t) {
  TS_CHECK(t.tier >= 0 && t.tier < int(tiers_.size()) && t.model >= 0 && t.model < n_models_);
  Submitted s;
  Actions actions;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!can_ever_serve(t)) {
      s.why = Refusal::kNoHealthyWorker;
      s.message = "no healthy worker serves this model for tier '" + tiers_[size_t(t.tier)].name + "'";
      return s;
    }
    int64_t queued = 0;
    for (int m = 0; m < n_models_; ++m) queued += int64_t(line(t.tier, m).size());
    if (queued >= tiers_[size_t(t.tier)].max_queued) {
      s.why = Refusal::kQueueFull;
      s.message = "tier '" + tiers_[size_t(t.tier)].name + "' has " + std::to_string(queued) + " requests waiting (its limit)";
      return s;
    }
    const int64_t now = clock_.now_ns();
    Queued q{next_id_++, std::move(t), now, now};
    s.accepted = true;
    s.id = q.id;
    auto& l = line(q.t.tier, q.t.model);
    if (q.t.at_head) l.push_front(std::move(q));
    else l.push_back(std::move(q));
    place_all(actions);
  }
  run(actions);
  return s;
}

void Fleet::finished(uint64_t id) {
  Actions actions;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = running_.find(id);
    if (it == running_.end()) return;
    WorkerState& s = ws_[size_t(it->second.worker)];
    --s.inflight;
    s.borrowed -= it->second.borrowed;
    --s.by_tier[size_t(it->second.tier)];
    running_.erase(it);
    place_all(actions);
  }
  run(actions);
}

bool Fleet::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& line : lines_)
    for (auto it = line.begin(); it != line.end(); ++it)
      if (it->id == id) {
        line.erase(it);
        return true;
      }
  return false;
}

void Fleet::set_load(int worker, const WorkerLoad& l) {
  Actions actions;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const bool was_up = ws_[size_t(worker)].load.up;
    ws_[size_t(worker)].load = l;
    if (was_up && !l.up) refuse_unservable(actions);
    if (l.up) place_all(actions);
  }
  run(actions);
}

void Fleet::tick() {
  Actions actions;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const int64_t now = clock_.now_ns();
    for (int t = 0; t < int(tiers_.size()); ++t) {
      const FleetTier& ft = tiers_[size_t(t)];
      if (ft.max_wait_ns <= 0) continue;
      for (int m = 0; m < n_models_; ++m) {
        auto& l = line(t, m);
        std::vector<Queued> moved;
        for (auto it = l.begin(); it != l.end();) {
          if (it->promoted || now - it->tier_since_ns < ft.max_wait_ns) {
            ++it;
            continue;
          }
          const std::string waited = "waited " + std::to_string((now - it->tier_since_ns) / 1000000) + " ms on tier '" +
                                     ft.name + "' (max " + std::to_string(ft.max_wait_ns / 1000000) + " ms)";
          if (ft.on_timeout == OnTimeout::kPromote) {
            it->promoted = true;
            moved.push_back(std::move(*it));
          } else if (ft.on_timeout == OnTimeout::kDowngrade && ft.downgrade_to >= 0) {
            Queued q = std::move(*it);
            q.t.tier = ft.downgrade_to;
            q.tier_since_ns = now;
            actions.push_back([cb = q.t.on_tier_changed, t, to = ft.downgrade_to] {
              if (cb) cb(t, to, "queue_timeout");
            });
            line(ft.downgrade_to, m).push_back(std::move(q));
          } else {
            actions.push_back([cb = std::move(it->t.on_refused), waited] {
              if (cb) cb(Refusal::kQueueTimeout, waited);
            });
          }
          it = l.erase(it);
        }
        // Promoted tickets go to the head of their line, in their order.
        for (auto r = moved.rbegin(); r != moved.rend(); ++r) l.push_front(std::move(*r));
      }
    }
    place_all(actions);
  }
  run(actions);
}

std::vector<int64_t> Fleet::queued_per_tier() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<int64_t> v(tiers_.size(), 0);
  for (size_t t = 0; t < tiers_.size(); ++t)
    for (int m = 0; m < n_models_; ++m) v[t] += int64_t(lines_[t * size_t(n_models_) + size_t(m)].size());
  return v;
}

std::vector<int64_t> Fleet::inflight_per_worker() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<int64_t> v;
  for (const auto& s : ws_) v.push_back(s.inflight);
  return v;
}

std::vector<bool> Fleet::up_per_worker() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<bool> v;
  for (const auto& s : ws_) v.push_back(s.load.up);
  return v;
}

int64_t Fleet::n_queued() const {
  std::lock_guard<std::mutex> lk(mu_);
  int64_t n = 0;
  for (const auto& l : lines_) n += int64_t(l.size());
  return n;
}

int64_t Fleet::n_inflight() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int64_t(running_.size());
}

}  // namespace ts::gateway
