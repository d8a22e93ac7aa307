#include "step_cost.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/log.h"

namespace ts::serving {

namespace {

constexpr engine::SeqId kScratch = engine::SeqId(1) << 62;  // never a request id

// One step on the engine, whose KV blocks its caller allocates (external_kv: serving's
// scheduler does, and it has not started yet): the calibration allocates from a pool of
// its own over the same tensors and gives every block back after each measurement.
class Scratch {
 public:
  explicit Scratch(engine::Engine& e) : e_(e), kv_(options(e)) {}
  ~Scratch() { clear(); }

  bool add(engine::SeqId id, uint64_t salt) {
    engine::SeqConfig cfg;
    cfg.isolation_key = salt;
    if (!e_.add(id, cfg).is_ok()) return false;
    kv_.add(id, salt, false);
    ids_.push_back(id);
    return true;
  }
  // *ok: every entry computed (false when the cache or the engine refused one).
  engine::StepResult step(engine::StepPlan& plan, bool* ok) {
    std::vector<kv::BlockCopy> copies;
    *ok = true;
    if (!e_.options().external_kv) {  // the engine allocates for itself
      engine::StepResult r = e_.step(plan);
      for (const engine::SeqResult& s : r.seqs) *ok = *ok && s.outcome == engine::SeqOutcome::kOk;
      return r;
    }
    for (const engine::SeqStep& st : plan.seqs) {
      *ok = *ok && kv_.reserve(st.seq, int64_t(st.tokens.size()), &copies);
      plan.kv.push_back(engine::SeqKv{kv_.n_computed(st.seq), kv_.blocks(st.seq), {}});
    }
    if (!*ok) return {};
    engine::StepResult r = e_.step(plan);
    for (const engine::SeqResult& s : r.seqs) {
      *ok = *ok && s.outcome == engine::SeqOutcome::kOk;
      kv_.commit(s.seq, {}, s.outcome == engine::SeqOutcome::kOk ? s.n_computed - kv_.n_computed(s.seq) : 0);
    }
    return r;
  }
  void clear() {
    for (engine::SeqId id : ids_) {
      (void)e_.remove(id);
      kv_.remove(id);
    }
    ids_.clear();
  }

 private:
  static kv::KvOptions options(const engine::Engine& e) {
    kv::KvOptions o;
    o.n_blocks = e.kv_stats().total;
    o.block_size = e.options().block_size;
    o.prefix_cache = false;
    return o;
  }
  engine::Engine& e_;
  kv::KvManager kv_;
  std::vector<engine::SeqId> ids_;
};

// Wall time of one step of n_seqs new sequences of n_tokens each (one output each); -1 if
// the engine refused it.
int64_t time_step(Scratch& k, int n_seqs, int64_t n_tokens, int64_t n_vocab, uint64_t salt) {
  engine::StepPlan plan;
  for (int s = 0; s < n_seqs; ++s) {
    const engine::SeqId id = kScratch + engine::SeqId(s);
    if (!k.add(id, salt)) return -1;
    engine::SeqStep st;
    st.seq = id;
    for (int64_t i = 0; i < n_tokens; ++i)
      st.tokens.push_back(int32_t((uint64_t(i + 1) * 7919 + uint64_t(s) * 104729 + salt) % uint64_t(n_vocab)));
    st.n_outputs = 1;
    plan.seqs.push_back(std::move(st));
  }
  bool ok = false;
  const auto t0 = std::chrono::steady_clock::now();
  (void)k.step(plan, &ok);
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  k.clear();
  return ok ? ns : -1;
}

}  // namespace

sched::StepCost measure_step_cost(engine::Engine& e, int32_t n_layers, int64_t n_vocab) {
  sched::StepCost c;
  Scratch k(e);
  const int64_t long_chunk = std::min<int64_t>(128, e.options().max_step_tokens);
  const int64_t short_chunk = 16, rows = 8;
  if (long_chunk <= short_chunk || n_vocab < 2) return c;
  // The shapes are timed in turn, five rounds, and each keeps its fastest run: other load
  // on the machine only ever adds time, and taking turns spreads it over all shapes alike.
  (void)time_step(k, 1, short_chunk, n_vocab, 7);  // warm caches and pages
  int64_t a = -1, b = -1, d = -1;
  auto keep = [](int64_t& best, int64_t ns) { best = ns < 0 ? -2 : best == -2 ? -2 : best < 0 ? ns : std::min(best, ns); };
  for (int rep = 0; rep < 5; ++rep) {
    keep(a, time_step(k, 1, short_chunk, n_vocab, uint64_t(rep) * 31 + 1));
    keep(b, time_step(k, 1, long_chunk, n_vocab, uint64_t(rep) * 31 + 2));
    keep(d, time_step(k, int(rows), 1, n_vocab, uint64_t(rep) * 31 + 3));
  }
  // Attention over a context: short chunks after `context` tokens of one sequence.
  const int64_t context = std::min<int64_t>(256, e.max_seq_len() - 4 * short_chunk);
  int64_t at_ctx = -1;
  if (context >= long_chunk) {
    const engine::SeqId id = kScratch + 100;
    if (k.add(id, 99)) {
      int64_t pos = 0;
      auto chunk = [&](int64_t n) {
        engine::StepPlan plan;
        engine::SeqStep st;
        st.seq = id;
        for (int64_t i = 0; i < n; ++i) st.tokens.push_back(int32_t((uint64_t(pos + i) * 7919 + 5) % uint64_t(n_vocab)));
        st.n_outputs = 1;
        plan.seqs.push_back(std::move(st));
        bool ok = false;
        const auto t0 = std::chrono::steady_clock::now();
        (void)k.step(plan, &ok);
        pos += n;
        return ok ? std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()
                  : int64_t(-1);
      };
      bool ok = true;
      for (int64_t done = 0; done < context && ok; done += std::min<int64_t>(context - done, e.options().max_step_tokens))
        ok = chunk(std::min<int64_t>(context - done, e.options().max_step_tokens)) >= 0;
      for (int rep = 0; rep < 3 && ok; ++rep) {
        const int64_t ns = chunk(short_chunk);
        ok = ns >= 0;
        if (ok) at_ctx = at_ctx < 0 ? ns : std::min(at_ctx, ns);
      }
      k.clear();
    }
  }
  k.clear();
  if (a < 0 || b < 0 || d < 0) {
    TS_LOG_WARN("serving: the step cost could not be measured (the KV cache refused the calibration steps)");
    return c;
  }
  // at_ctx = a + pair_ns x 16 x context (the chunk's extra attention pairs); then, with the
  // pairs of each chunk at context 0 taken out:
  // a = f + 16 t + o;  b = f + L t + o;  d = f + 8 t + 8 o.
  if (at_ctx >= 0)
    c.pair_ns = std::max(0.0, double(at_ctx - a) / (double(short_chunk) * double(context)));
  const double pa = c.pair_ns * sched::StepCost::pairs(short_chunk, 0), pb = c.pair_ns * sched::StepCost::pairs(long_chunk, 0);
  c.token_ns = (double(b) - pb - (double(a) - pa)) / double(long_chunk - short_chunk);
  // Noise can still leave the long chunk no slower than the short one: then the per-token
  // cost is bounded by the long chunk's time over its tokens (an over-estimate: it keeps
  // the fixed part), never taken as free.
  if (!(c.token_ns > 0.25 * double(b) / double(long_chunk))) {
    TS_LOG_WARN("serving: noisy step cost calibration (16 tokens %lld ns, %lld tokens %lld ns): per-token cost bounded",
                (long long)a, (long long)long_chunk, (long long)b);
    c.token_ns = double(b) / double(long_chunk);
  }
  c.output_ns = std::max(0.0, ((double(d) - double(rows) * c.token_ns) - (double(a) - pa - double(short_chunk) * c.token_ns)) /
                                  double(rows - 1));
  c.fixed_ns = std::max(0.0, double(a) - pa - double(short_chunk) * c.token_ns - c.output_ns);
  c.n_layers = std::max(1, n_layers);
  return c;
}

int64_t derive_step_budget(const sched::StepCost& c, double max_segment_ms, int64_t max_step_tokens) {
  if (!c.measured()) return 64;
  int64_t best = 16;
  for (int64_t b = 16; b <= 512 && b <= std::max<int64_t>(16, max_step_tokens); b *= 2)
    if (c.segment_ns(b, 0) <= max_segment_ms * 1e6) best = b;
  return best;
}

int64_t derive_burst_tokens(const sched::StepCost& c, int64_t max_queue_wait_ms, int64_t budget) {
  if (!c.measured() || max_queue_wait_ms <= 0) return 512;
  const double fit = (double(max_queue_wait_ms) * 1e6 - c.fixed_ns) / c.token_ns;
  return std::clamp<int64_t>(int64_t(fit) - budget, budget, 2048);
}

void StepCostTracker::observe(int64_t n_tokens, int64_t n_outputs, double n_pairs, int64_t time_ns) {
  const double predicted = base_.step_ns(n_tokens, n_outputs, n_pairs);
  if (!base_.measured() || predicted <= 0 || time_ns <= 0) return;
  const double ratio = std::clamp(double(time_ns) / predicted, 0.25, 8.0);
  scale_ += 0.05 * (ratio - scale_);
}

}  // namespace ts::serving
