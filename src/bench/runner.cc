// The run: phases, open- and closed-loop dispatch, sweep and comparison.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <nlohmann/json.hpp>

#include "bench/bench.h"
#include "client.h"

namespace ts::bench {

namespace asio = boost::asio;

namespace {

// The wire form of a workload request.
WireRequest to_wire(const RequestSpec& r, const Options& o) {
  nlohmann::json body;
  if (!o.model.empty()) body["model"] = o.model;
  WireRequest w;
  if (r.endpoint == "completions") {
    w.path = "/v1/completions";
    body["prompt"] = r.prompt;
  } else {
    w.path = "/v1/chat/completions";
    if (!r.messages_json.empty()) body["messages"] = nlohmann::json::parse(r.messages_json, nullptr, false);
    else body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", r.prompt}}});
  }
  body["max_tokens"] = r.max_tokens;
  if (r.temperature) body["temperature"] = *r.temperature;
  else if (o.temperature) body["temperature"] = *o.temperature;
  if (!r.tier.empty()) body["service_tier"] = r.tier;
  body["stream"] = o.stream;
  if (o.stream && o.include_usage) body["stream_options"] = {{"include_usage", true}};
  w.body = body.dump();
  w.api_key = r.api_key;
  if (w.api_key.empty()) {
    auto it = o.tier_keys.find(r.tier);
    w.api_key = it != o.tier_keys.end() ? it->second : o.api_key;
  }
  return w;
}

// One request due at an offset from the phase start.
struct Item {
  int64_t offset_ns;
  size_t index;
  std::string phase;
  std::string tier;  // per-tier arrivals: the tier of this arrival ("" = the workload's)
};

std::string fmt_ms(double v) {
  if (std::isnan(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, v < 10 ? "%.1f" : "%.0f", v);
  return b;
}

class Runner {
 public:
  Runner(const Options& o, const Workload& w, const Clock& c) : o_(o), w_(w), clock_(c) {}

  Result<Report> run();

 private:
  // Open loop: sends each item at its offset (or when a slot frees up past the cap).
  std::vector<RequestRecord> run_open(std::vector<Item> items, HttpClient& client, const std::string& label);
  // Closed loop: `conc` workers, each sending its next request when the previous ended.
  // Stops issuing after `n` requests (n > 0) or `duration_s`. Workers start spread over
  // ramp_s; requests issued during the ramp get phase "ramp".
  std::vector<RequestRecord> run_closed(int conc, size_t n, double duration_s, double ramp_s,
                                        const std::string& phase, HttpClient& client, const std::string& label,
                                        size_t first_index, size_t* n_issued);
  std::vector<Item> open_items(const ArrivalSpec& a, size_t n, double duration_s, const std::string& phase,
                               size_t first_index, uint64_t seed_salt);
  std::vector<RequestRecord> run_phase(const std::string& phase, size_t n, double duration_s, double ramp_s,
                                       double level, HttpClient& client, const std::string& label,
                                       size_t first_index, uint64_t seed_salt, size_t* n_used);
  void send(HttpClient& client, const Item& it, int64_t scheduled_ns, const std::string& label,
            std::function<void(RequestRecord&&)> done);
  void start_progress(const std::string& phase);
  void stop_progress();
  void progress_line(bool final);

  const Options& o_;
  const Workload& w_;
  const Clock& clock_;
  asio::io_context io_;
  size_t next_index_ = 0;

  // Live progress of the current phase.
  std::unique_ptr<asio::steady_timer> progress_timer_;
  std::string progress_phase_;
  int64_t progress_start_ns_ = 0;
  size_t n_sent_ = 0, n_done_ = 0, n_err_ = 0, n_inflight_ = 0, n_total_ = 0;
  double last_ttft_ms_ = NAN;
  bool tty_ = false;
  int progress_ticks_ = 0;
};

void Runner::send(HttpClient& client, const Item& it, int64_t scheduled_ns, const std::string& label,
                  std::function<void(RequestRecord&&)> done) {
  RequestSpec spec = w_.at(it.index);
  if (!it.tier.empty()) spec.tier = it.tier == "default" ? "" : it.tier;
  RequestRecord rec;
  rec.index = it.index;
  rec.phase = it.phase;
  rec.target = label;
  rec.tier_requested = spec.tier;
  rec.streamed = o_.stream;
  rec.max_tokens = spec.max_tokens;
  rec.scheduled_ns = scheduled_ns;
  ++n_sent_;
  ++n_inflight_;
  client.send(to_wire(spec, o_), std::move(rec), [this, done = std::move(done)](RequestRecord&& r) {
    --n_inflight_;
    ++n_done_;
    if (!r.ok()) ++n_err_;
    else if (r.first_token_ns) last_ttft_ms_ = r.ttft_ms();
    done(std::move(r));
  });
}

std::vector<Item> Runner::open_items(const ArrivalSpec& a, size_t n, double duration_s, const std::string& phase,
                                     size_t first_index, uint64_t seed_salt) {
  std::vector<Item> items;
  if (o_.mode == "replay") {
    // The file's own offsets, from the first request of this phase.
    const auto first = w_.at(first_index).offset_ms.value_or(0);
    for (size_t i = 0;; ++i) {
      if (n && i >= n) break;
      const RequestSpec r = w_.at(first_index + i);
      const double off_ms = (r.offset_ms.value_or(0) - first) / o_.replay_speed;
      const int64_t off_ns = int64_t(off_ms * 1e6);
      if (!n && off_ns >= int64_t(duration_s * 1e9)) break;
      if (!n && i > 10'000'000) break;
      items.push_back({off_ns, first_index + i, phase, ""});
    }
    return items;
  }
  if (!o_.tier_rates.empty()) {
    // One arrival process per tier at its own rate (scaled so the rates sum to the
    // phase's level), merged in time order: a tier's load moves without the others'.
    double total = 0;
    for (const auto& [t, r] : o_.tier_rates) total += r;
    std::vector<std::pair<int64_t, std::string>> merged;
    uint64_t k = 0;
    for (const auto& [t, r] : o_.tier_rates) {
      ArrivalSpec ta = a;
      ta.rate_rps = a.rate_rps * r / total;
      Rng rng(o_.seed * 0x2545F4914F6CDD1Dull + seed_salt * 131 + ++k);
      const size_t n_t = n ? size_t(std::ceil(double(n) * r / total)) + size_t(std::ceil(ta.rate_rps * ta.ramp_s)) : 0;
      for (int64_t x : arrival_schedule(ta, n_t, n ? 0 : int64_t((duration_s + a.ramp_s) * 1e9), rng))
        merged.emplace_back(x, t);
    }
    std::stable_sort(merged.begin(), merged.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    const int64_t ramp_ns = int64_t(a.ramp_s * 1e9);
    size_t steady = 0;
    for (size_t i = 0; i < merged.size(); ++i) {
      const bool in_ramp = merged[i].first < ramp_ns;
      if (n && !in_ramp && steady >= n) break;
      steady += in_ramp ? 0 : 1;
      items.push_back({merged[i].first, first_index + i, in_ramp ? "ramp" : phase, merged[i].second});
    }
    return items;
  }
  Rng rng(o_.seed * 0x2545F4914F6CDD1Dull + seed_salt);
  std::vector<int64_t> sched;
  if (n) {
    // Count mode: enough arrivals that `n` of them fall after the ramp.
    const size_t in_ramp = size_t(std::ceil(a.rate_rps * a.ramp_s)) + 16;
    sched = arrival_schedule(a, n + in_ramp, 0, rng);
    const int64_t ramp_ns = int64_t(a.ramp_s * 1e9);
    size_t steady = 0, cut = sched.size();
    for (size_t i = 0; i < sched.size(); ++i)
      if (sched[i] >= ramp_ns && ++steady == n) {
        cut = i + 1;
        break;
      }
    sched.resize(cut);
  } else {
    sched = arrival_schedule(a, 0, int64_t((duration_s + a.ramp_s) * 1e9), rng);
  }
  const int64_t ramp_ns = int64_t(a.ramp_s * 1e9);
  for (size_t i = 0; i < sched.size(); ++i)
    items.push_back({sched[i], first_index + i, sched[i] < ramp_ns ? "ramp" : phase, ""});
  return items;
}

std::vector<RequestRecord> Runner::run_open(std::vector<Item> items, HttpClient& client, const std::string& label) {
  std::vector<RequestRecord> out;
  out.reserve(items.size());
  if (items.empty()) return out;
  n_total_ = items.size();
  asio::steady_timer timer(io_);
  // A small lead so the first request is not already late when the loop starts.
  const int64_t start_ns = clock_.now_ns() + 2'000'000;
  size_t next = 0;
  std::deque<std::pair<size_t, int64_t>> waiting;  // over the in-flight cap: (item, scheduled)
  size_t outstanding = items.size();
  std::function<void()> arm;
  std::function<void(RequestRecord&&)> on_done = [&](RequestRecord&& r) {
    out.push_back(std::move(r));
    --outstanding;
    if (!waiting.empty()) {
      auto [i, sched] = waiting.front();
      waiting.pop_front();
      send(client, items[i], sched, label, on_done);
    }
    if (outstanding == 0) stop_progress();
  };
  arm = [&]() {
    if (next >= items.size()) return;
    const int64_t due = start_ns + items[next].offset_ns;
    timer.expires_at(std::chrono::steady_clock::time_point(std::chrono::nanoseconds(due)));
    timer.async_wait([&](const boost::system::error_code& ec) {
      if (ec) return;
      const int64_t now = clock_.now_ns();
      while (next < items.size() && start_ns + items[next].offset_ns <= now) {
        const int64_t sched = start_ns + items[next].offset_ns;
        if (n_inflight_ < size_t(o_.max_inflight)) send(client, items[next], sched, label, on_done);
        else waiting.emplace_back(next, sched);
        ++next;
      }
      arm();
    });
  };
  arm();
  io_.restart();
  io_.run();
  return out;
}

std::vector<RequestRecord> Runner::run_closed(int conc, size_t n, double duration_s, double ramp_s,
                                              const std::string& phase, HttpClient& client,
                                              const std::string& label, size_t first_index, size_t* n_issued) {
  std::vector<RequestRecord> out;
  const int64_t start_ns = clock_.now_ns();
  const int64_t ramp_end_ns = start_ns + int64_t(ramp_s * 1e9);
  const int64_t end_ns = ramp_end_ns + int64_t(duration_s * 1e9);
  size_t issued = 0, steady_issued = 0, outstanding = 0;
  n_total_ = n;
  std::vector<std::unique_ptr<asio::steady_timer>> starts;
  std::function<void()> launch = [&]() {
    const int64_t now = clock_.now_ns();
    const bool in_ramp = now < ramp_end_ns;
    if (n ? steady_issued >= n : now >= end_ns) {
      if (outstanding == 0) stop_progress();
      return;
    }
    Item it{0, first_index + issued, in_ramp ? "ramp" : phase, ""};
    ++issued;
    if (!in_ramp) ++steady_issued;
    ++outstanding;
    // Closed loop: the next request is due the moment the previous one ended, so the
    // scheduled and the send time coincide (no omission to correct for).
    send(client, it, now, label, [&](RequestRecord&& r) {
      out.push_back(std::move(r));
      --outstanding;
      launch();
    });
  };
  for (int k = 0; k < conc; ++k) {
    const int64_t delay_ns = conc > 1 ? int64_t(ramp_s * 1e9 * double(k) / double(conc)) : 0;
    if (delay_ns == 0) {
      asio::post(io_, launch);
      continue;
    }
    auto t = std::make_unique<asio::steady_timer>(io_);
    t->expires_after(std::chrono::nanoseconds(delay_ns));
    t->async_wait([&](const boost::system::error_code& ec) {
      if (!ec) launch();
    });
    starts.push_back(std::move(t));
  }
  io_.restart();
  io_.run();
  *n_issued = issued;
  return out;
}

std::vector<RequestRecord> Runner::run_phase(const std::string& phase, size_t n, double duration_s, double ramp_s,
                                             double level, HttpClient& client, const std::string& label,
                                             size_t first_index, uint64_t seed_salt, size_t* n_used) {
  start_progress(phase);
  std::vector<RequestRecord> recs;
  if (o_.mode == "closed") {
    recs = run_closed(int(level), n, duration_s, ramp_s, phase, client, label, first_index, n_used);
  } else {
    ArrivalSpec a = o_.arrival;
    a.rate_rps = level;
    a.ramp_s = ramp_s;
    auto items = open_items(a, n, duration_s, phase, first_index, seed_salt);
    *n_used = items.size();
    recs = run_open(std::move(items), client, label);
  }
  stop_progress();
  progress_line(true);
  std::sort(recs.begin(), recs.end(), [](const RequestRecord& a, const RequestRecord& b) {
    return a.scheduled_ns != b.scheduled_ns ? a.scheduled_ns < b.scheduled_ns : a.index < b.index;
  });
  return recs;
}

void Runner::start_progress(const std::string& phase) {
  progress_phase_ = phase;
  progress_start_ns_ = clock_.now_ns();
  n_sent_ = n_done_ = n_err_ = 0;
  last_ttft_ms_ = NAN;
  if (!o_.progress) return;
  progress_timer_ = std::make_unique<asio::steady_timer>(io_);
  auto* timer = progress_timer_.get();
  struct Tick {
    Runner* self;
    asio::steady_timer* timer;
    void operator()(const boost::system::error_code& ec) const {
      if (ec) return;
      // A terminal redraws one line twice a second; a log gets a line every 5 s.
      if (self->tty_ || ++self->progress_ticks_ % 10 == 0) self->progress_line(false);
      timer->expires_after(std::chrono::milliseconds(500));
      timer->async_wait(*this);
    }
  };
  timer->expires_after(std::chrono::milliseconds(500));
  timer->async_wait(Tick{this, timer});
}

void Runner::stop_progress() {
  if (progress_timer_) progress_timer_->cancel();
}

void Runner::progress_line(bool final) {
  if (!o_.progress) return;
  const double t = double(clock_.now_ns() - progress_start_ns_) / 1e9;
  char line[256];
  std::snprintf(line, sizeof line, "[%s %5.1fs] sent %zu done %zu in-flight %zu errors %zu  %.1f req/s  last ttft %s ms",
                progress_phase_.c_str(), t, n_sent_, n_done_, n_inflight_, n_err_,
                t > 0 ? double(n_done_) / t : 0.0, fmt_ms(last_ttft_ms_).c_str());
  if (tty_) std::fprintf(stderr, "\r\033[K%s%s", line, final ? "\n" : "");
  else std::fprintf(stderr, "%s\n", line);
  std::fflush(stderr);
}

std::string mode_name(const Options& o) {
  char b[128];
  if (!o.sweep.empty())
    return o.mode == "closed" ? std::string("closed loop, sweep of concurrency")
                              : std::string("open loop, sweep of ") + arrival_kind_name(o.arrival.kind) + " arrival rates";
  if (o.mode == "closed") std::snprintf(b, sizeof b, "closed loop, concurrency %d", o.concurrency);
  else if (!o.tier_rates.empty()) {
    std::string s = std::string("open loop, ") + arrival_kind_name(o.arrival.kind) + " arrivals per tier:";
    for (const auto& [t, r] : o.tier_rates) {
      std::snprintf(b, sizeof b, " %s=%.2f", t.c_str(), r);
      s += b;
    }
    s += " req/s";
    return s;
  }
  else if (o.mode == "replay") std::snprintf(b, sizeof b, "replay of file offsets at %.2fx", o.replay_speed);
  else if (o.arrival.kind == ArrivalKind::kGamma)
    std::snprintf(b, sizeof b, "open loop, gamma arrivals (cv %.2f) at %.2f req/s", o.arrival.cv, o.arrival.rate_rps);
  else
    std::snprintf(b, sizeof b, "open loop, %s arrivals at %.2f req/s", arrival_kind_name(o.arrival.kind), o.arrival.rate_rps);
  std::string s = b;
  if (o.arrival.ramp_s > 0 && o.mode == "open") s += ", ramp-up " + std::to_string(int(o.arrival.ramp_s)) + " s";
  return s;
}

Result<Report> Runner::run() {
  tty_ = isatty(2);
  Report rep;
  rep.target_url = o_.url;
  rep.workload = w_.describe();
  rep.seed = o_.seed;
  rep.price_per_hour = o_.price_per_hour;
  rep.mode = mode_name(o_);
  rep.slo_given = o_.slo_given;
  rep.sweep_metric = o_.sweep_metric;
  rep.sweep_unit = o_.mode == "closed" ? "concurrency" : "rps";

  TS_ASSIGN_OR_RETURN(Target ta, parse_url(o_.url));
  ta.label = o_.label_a;
  ta.model_version = o_.version_a;
  TS_ASSIGN_OR_RETURN(auto client_a, HttpClient::create(io_, ta, clock_, o_.request_timeout_s));
  std::unique_ptr<HttpClient> client_b;
  if (!o_.url_b.empty()) {
    TS_ASSIGN_OR_RETURN(Target tb, parse_url(o_.url_b));
    tb.label = o_.label_b;
    tb.model_version = o_.version_b;
    TS_ASSIGN_OR_RETURN(client_b, HttpClient::create(io_, tb, clock_, o_.request_timeout_s));
  }
  AggregateOptions agg;
  agg.bucket_s = o_.bucket_s;
  agg.price_per_hour = o_.price_per_hour;
  agg.slo = o_.slo_given ? &o_.slo : nullptr;
  const double level = o_.mode == "closed" ? double(o_.concurrency) : o_.arrival.rate_rps;
  size_t used = 0;

  // 1. Cold start: one request alone, before anything else warmed the server.
  if (o_.cold_start) {
    for (HttpClient* c : {client_a.get(), client_b.get()}) {
      if (!c) continue;
      start_progress("cold");
      RequestRecord cold;
      send(*c, Item{0, next_index_, "cold", ""}, clock_.now_ns(), c->target().label,
           [&](RequestRecord&& r) {
             cold = std::move(r);
             stop_progress();
           });
      io_.restart();
      io_.run();
      progress_line(true);
      if (cold.error == "connect")
        return io_error("cannot connect to " + (c == client_a.get() ? o_.url : o_.url_b) + ": " + cold.error_detail);
      if (c == client_a.get()) {
        rep.has_cold = true;
        rep.cold = cold;
      }
      rep.records.push_back(std::move(cold));
    }
    ++next_index_;
  }

  // 2. Warm-up: the same load shape, excluded from every statistic.
  if (o_.warmup_requests || o_.warmup_s > 0) {
    for (HttpClient* c : {client_a.get(), client_b.get()}) {
      if (!c) continue;
      auto recs = run_phase("warmup", o_.warmup_requests, o_.warmup_s, 0, level, *c, c->target().label,
                            next_index_, 1, &used);
      rep.n_warmup += recs.size();
      for (auto& r : recs) rep.n_warmup_errors += r.ok() ? 0 : 1;
    }
    next_index_ += used;
  }

  // 3a. Sweep: one measured step per level.
  if (!o_.sweep.empty()) {
    std::vector<double> levels = o_.sweep;
    std::sort(levels.begin(), levels.end());
    size_t k = 0;
    for (double lv : levels) {
      char name[48];
      std::snprintf(name, sizeof name, "sweep:%g", lv);
      const double step_s = o_.sweep_step_requests ? 0 : o_.sweep_step_s;
      auto recs = run_phase(name, o_.sweep_step_requests, step_s, 0, lv, *client_a, client_a->target().label,
                            next_index_, 100 + k++, &used);
      next_index_ += used;
      SweepStep st;
      st.offered = lv;
      st.stats = aggregate(recs, name, agg);
      if (o_.slo_given) {
        PhaseMetricSource src(st.stats);
        st.slo_pass = all_pass(evaluate_slo(o_.slo, src));
      }
      for (auto& r : recs) rep.records.push_back(std::move(r));
      rep.sweep.push_back(std::move(st));
    }
    auto curve = sweep_curve(rep);
    rep.knee_index = find_knee(curve);
    int best = -1;
    for (size_t i = 0; i < rep.sweep.size(); ++i)
      if (rep.sweep[i].slo_pass && rep.sweep[i].stats.overall.n_ok > 0) best = int(i);
    if (o_.slo_given && best >= 0) rep.max_rate_meeting_slo = rep.sweep[size_t(best)].offered;
    // The headline stats (and the SLO verdict) are those of the highest passing step;
    // without SLOs, of the knee (else the last step).
    int pick = o_.slo_given ? best : rep.knee_index;
    if (pick < 0) pick = o_.slo_given ? 0 : int(rep.sweep.size()) - 1;
    rep.steady = rep.sweep[size_t(pick)].stats;
    if (o_.slo_given) {
      PhaseMetricSource src(rep.steady);
      rep.verdicts = evaluate_slo(o_.slo, src);
      // No step met the SLOs: the run fails even if step 0 alone looks fine per tier.
      if (best < 0)
        for (auto& v : rep.verdicts) v.pass = false;
    }
    return rep;
  }

  // 3b. Steady state, with the ramp-up first (excluded), or ABBA blocks in comparison.
  if (!client_b) {
    auto recs = run_phase("steady", o_.n_requests, o_.duration_s, o_.arrival.ramp_s, level, *client_a,
                          client_a->target().label, next_index_, 2, &used);
    next_index_ += used;
    std::vector<RequestRecord> steady;
    for (auto& r : recs)
      if (r.phase == "steady") steady.push_back(r);
    rep.steady = aggregate(steady, "steady", agg);
    for (auto& r : recs) rep.records.push_back(std::move(r));
  } else {
    rep.has_compare = true;
    rep.compare.label_a = o_.label_a;
    rep.compare.label_b = o_.label_b;
    std::vector<RequestRecord> ra, rb;
    const int rounds = o_.compare_rounds;
    const size_t n_block = o_.n_requests ? std::max<size_t>(1, o_.n_requests / size_t(rounds)) : 0;
    const double s_block = o_.duration_s / rounds;
    double dur_a = 0, dur_b = 0;
    for (int r = 0; r < rounds; ++r) {
      const size_t first = next_index_;
      // ABBA: the order alternates so drift (thermal, caches, the other server's
      // leftovers) falls on both sides equally.
      const bool a_first = r % 2 == 0;
      for (int side = 0; side < 2; ++side) {
        HttpClient* c = (side == 0) == a_first ? client_a.get() : client_b.get();
        const int64_t t0 = clock_.now_ns();
        auto recs = run_phase("steady", n_block, s_block, r == 0 ? o_.arrival.ramp_s : 0, level, *c,
                              c->target().label, first, 2 + uint64_t(r), &used);
        const double dt = double(clock_.now_ns() - t0) / 1e9;
        for (auto& x : recs) {
          if (x.phase == "steady") (c == client_a.get() ? ra : rb).push_back(x);
          rep.records.push_back(std::move(x));
        }
        (c == client_a.get() ? dur_a : dur_b) += dt;
      }
      next_index_ = first + used;
    }
    rep.compare.a = aggregate(ra, "steady", agg, dur_a);
    rep.compare.b = aggregate(rb, "steady", agg, dur_b);
    rep.steady = rep.compare.a;
  }
  if (o_.slo_given) {
    PhaseMetricSource src(rep.steady);
    rep.verdicts = evaluate_slo(o_.slo, src);
  }
  return rep;
}

}  // namespace

Result<Report> run_bench(const Options& opt, const Workload& workload, const Clock& clock) {
  Runner r(opt, workload, clock);
  return r.run();
}

}  // namespace ts::bench
