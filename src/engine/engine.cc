#include "engine/engine.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/clock.h"

namespace ts::engine {
namespace {

constexpr int64_t kDefaultMaxSeqLen = 4096;
constexpr int64_t kMaxSeqLenLimit = int64_t(1) << 22;
constexpr int64_t kMaxStepTokens = int64_t(1) << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

const char* seq_outcome_name(SeqOutcome o) {
  switch (o) {
    case SeqOutcome::kOk: return "ok";
    case SeqOutcome::kNoRoom: return "no_room";
    case SeqOutcome::kInvalid: return "invalid";
    case SeqOutcome::kInterrupted: return "interrupted";
  }
  return "?";
}

Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::create(Model& model, const EngineOptions& opts) {
  if (opts.block_size < 1 || opts.block_size > 4096)
    return invalid_argument("block_size = " + std::to_string(opts.block_size) + " must be in [1, 4096]");
  if (opts.max_step_tokens < 1 || opts.max_step_tokens > kMaxStepTokens)
    return invalid_argument("max_step_tokens = " + std::to_string(opts.max_step_tokens) + " must be in [1, " +
                            std::to_string(kMaxStepTokens) + "]");
  if (opts.max_seq_len < 0 || opts.max_seq_len > kMaxSeqLenLimit)
    return invalid_argument("max_seq_len = " + std::to_string(opts.max_seq_len) + " must be in [0, " +
                            std::to_string(kMaxSeqLenLimit) + "]");
  if (opts.n_blocks < 0) return invalid_argument("n_blocks = " + std::to_string(opts.n_blocks) + " must be >= 0");

  std::unique_ptr<Engine> e(new Engine(model, opts));
  const ModelConfig& cfg = model.config();
  e->n_vocab_ = cfg.n_vocab;
  e->max_seq_len_ = opts.max_seq_len > 0 ? opts.max_seq_len : (cfg.n_ctx_train > 0 ? cfg.n_ctx_train : kDefaultMaxSeqLen);
  e->max_seq_len_ = std::min(e->max_seq_len_, kMaxSeqLenLimit);

  const KvShape shape = model.arch().kv_shape();
  const uint64_t block_bytes = uint64_t(shape.n_layer) * uint64_t(opts.block_size) * uint64_t(shape.n_head_kv) *
                               uint64_t(shape.head_dim_k + shape.head_dim_v) * sizeof(uint16_t);
  int64_t n_blocks = 0;
  if (opts.kv_bytes > 0) n_blocks = int64_t(opts.kv_bytes / std::max<uint64_t>(1, block_bytes));
  else if (opts.n_blocks > 0) n_blocks = opts.n_blocks;
  else n_blocks = 4 * ceil_div(e->max_seq_len_, opts.block_size);
  if (n_blocks < 1)
    return invalid_argument("a KV budget of " + std::to_string(opts.kv_bytes) + " bytes holds no block of " +
                            std::to_string(block_bytes) + " bytes");
  if (n_blocks > std::numeric_limits<int32_t>::max() / 2)
    return invalid_argument("KV budget of " + std::to_string(n_blocks) + " blocks is too large");

  TS_ASSIGN_OR_RETURN(e->kv_, KvCache::create(shape, n_blocks, opts.block_size));
  if (!opts.external_kv) {
    kv::KvOptions ko;
    ko.n_blocks = int32_t(n_blocks);
    ko.block_size = opts.block_size;
    ko.prefix_cache = opts.prefix_cache;
    ko.share_prefixes = opts.share_prefixes;
    e->kvm_ = std::make_unique<kv::KvManager>(ko);
  }
  e->ws_ = model.arch().make_workspace(opts.max_step_tokens, model.n_threads());
  return e;
}

Engine::Seq* Engine::find(SeqId id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

const Engine::Seq* Engine::find(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

Status Engine::own_kv(const char* what) const {
  if (!kvm_) return failed_precondition(std::string(what) + ": the engine's KV blocks are managed by its caller (external_kv)");
  return Status::ok();
}

// Tokens the sampler has not seen yet (a prefix reused from the cache, a fork's history).
void Engine::catch_up(Seq& s, std::span<const int32_t> history, int64_t upto) {
  for (int64_t p = s.n_accepted; p < upto; ++p) s.sampler->accept(history[size_t(p)]);
  s.n_accepted = std::max(s.n_accepted, upto);
}

// --- sequence life cycle -----------------------------------------------------------------

Status Engine::add(SeqId id, const SeqConfig& cfg) {
  if (seqs_.count(id)) return invalid_argument("sequence " + std::to_string(id) + " already exists");
  TS_RETURN_IF_ERROR(validate(cfg.sampling));
  Seq& s = seqs_[id];
  s.cfg = cfg;
  s.sampler = std::make_unique<Sampler>(cfg.sampling);
  if (kvm_) kvm_->add(id, cfg.isolation_key);
  return Status::ok();
}

Result<int64_t> Engine::reuse_prefix(SeqId id, std::span<const int32_t> tokens) {
  TS_RETURN_IF_ERROR(own_kv("reuse_prefix"));
  Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  if (const int64_t have = kvm_->n_computed(id); have != 0)
    return failed_precondition("sequence " + std::to_string(id) + " already has " + std::to_string(have) +
                               " tokens computed");
  const int64_t n = kvm_->reuse_prefix(id, tokens, max_seq_len_);
  catch_up(*s, kvm_->tokens(id), n);
  return n;
}

Status Engine::fork(SeqId src, SeqId dst, const SeqConfig& cfg) {
  TS_RETURN_IF_ERROR(own_kv("fork"));
  if (!find(src)) return invalid_argument("unknown sequence " + std::to_string(src));
  if (seqs_.count(dst)) return invalid_argument("sequence " + std::to_string(dst) + " already exists");
  TS_RETURN_IF_ERROR(validate(cfg.sampling));
  Seq d;
  d.cfg = cfg;
  d.cfg.isolation_key = find(src)->cfg.isolation_key;  // the shared KV was computed under src's key
  d.sampler = std::make_unique<Sampler>(cfg.sampling);
  TS_CHECK(kvm_->fork(src, dst));
  catch_up(d, kvm_->tokens(dst), kvm_->n_computed(dst));
  seqs_.emplace(dst, std::move(d));
  return Status::ok();
}

Status Engine::pause(SeqId id) {
  Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  s->state = SeqState::kPaused;
  return Status::ok();
}

Status Engine::resume(SeqId id) {
  Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  s->state = SeqState::kRunning;
  return Status::ok();
}

Status Engine::preempt(SeqId id) {
  Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  if (kvm_) kvm_->free(id);
  ++s->n_preemptions;
  return Status::ok();
}

Status Engine::truncate(SeqId id, int64_t n_keep) {
  TS_RETURN_IF_ERROR(own_kv("truncate"));
  if (!find(id)) return invalid_argument("unknown sequence " + std::to_string(id));
  const int64_t have = kvm_->n_computed(id);
  if (n_keep < 0 || n_keep > have)
    return invalid_argument("truncate to " + std::to_string(n_keep) + " tokens: sequence " + std::to_string(id) +
                            " has " + std::to_string(have));
  kvm_->truncate(id, n_keep);
  return Status::ok();
}

Status Engine::remove(SeqId id) {
  if (!find(id)) return invalid_argument("unknown sequence " + std::to_string(id));
  if (kvm_) kvm_->remove(id);
  seqs_.erase(id);
  return Status::ok();
}

Result<SeqInfo> Engine::info(SeqId id) const {
  const Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  SeqInfo i;
  i.state = s->state;
  i.n_computed = kvm_ ? kvm_->n_computed(id) : 0;
  i.n_blocks = kvm_ ? kvm_->n_seq_blocks(id) : 0;
  i.n_preemptions = s->n_preemptions;
  return i;
}

KvStats Engine::kv_stats() const {
  KvStats k;
  k.block_size = opts_.block_size;
  k.total = int32_t(kv_->n_blocks());
  if (kvm_) {
    k.used = kvm_->pool().n_used();
    k.cached = kvm_->pool().n_cached();
    k.free = kvm_->pool().n_free();
  }
  k.bytes = kv_->bytes();
  return k;
}

void Engine::clear_prefix_cache() {
  if (kvm_) kvm_->clear_cache();
}

void Engine::touch_kv() { kv_->touch(); }

bool Engine::check_consistency() const {
  if (!kvm_) return true;
  for (const auto& [id, s] : seqs_)
    if (!kvm_->contains(id)) return false;
  return kvm_->check_consistency();
}

int64_t Engine::blocks_needed(SeqId id, int64_t n_new) const {
  if (!kvm_ || !find(id)) return -1;
  return kvm_->blocks_needed(id, n_new);
}

// --- step --------------------------------------------------------------------------------

StepResult Engine::step(const StepPlan& plan) {
  const int64_t t0 = now_ns();
  StepResult r;
  r.seqs.resize(plan.seqs.size());

  // 1. Validate and map each entry to its blocks, in plan order: the blocks the caller
  // gives (external_kv: the scheduler allocated them while planning), else a reservation
  // in the engine's own KvManager.
  struct Item {
    Seq* s;
    size_t entry;
    int64_t p0;     // n_computed before the step
    int64_t out0;   // first output row in logits_
    std::span<const int32_t> blocks;
  };
  std::vector<Item> items;
  items.reserve(plan.seqs.size());
  std::vector<SeqId> ids;
  ids.reserve(plan.seqs.size());
  const int64_t bs = opts_.block_size, n_kv_blocks = kv_->n_blocks();
  std::vector<kv::BlockCopy> copies;
  // The caller's copies (external_kv) must name blocks of this cache; one that does not
  // (or copies given to an engine that makes its own) refuses the whole step: computing
  // on a block that was not copied would read another sequence's KV.
  std::string bad_copies;
  for (const auto& [src, dst] : plan.copies) {
    if (kvm_) bad_copies = "block copies given to an engine that manages its own KV";
    else if (src < 0 || dst < 0 || src >= n_kv_blocks || dst >= n_kv_blocks)
      bad_copies = "copy of block " + std::to_string(src) + " to " + std::to_string(dst) + " outside the KV cache's " +
                   std::to_string(n_kv_blocks) + " blocks";
    else copies.push_back({src, dst});
  }
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqStep& st = plan.seqs[i];
    SeqResult& res = r.seqs[i];
    res.seq = st.seq;
    Seq* s = find(st.seq);
    auto invalid = [&](std::string why) {
      res.outcome = SeqOutcome::kInvalid;
      res.error = "sequence " + std::to_string(st.seq) + ": " + std::move(why);
    };
    if (!s) {
      invalid("unknown");
      continue;
    }
    if (!bad_copies.empty()) {
      invalid(bad_copies);
      continue;
    }
    if (kvm_ ? !plan.kv.empty() : plan.kv.size() != plan.seqs.size()) {
      invalid(kvm_ ? "blocks given to an engine that manages its own KV"
                   : "no blocks: the caller manages the KV (external_kv) and gave none for this entry");
      continue;
    }
    const SeqKv ext = kvm_ ? SeqKv{} : plan.kv[i];
    const int64_t p0 = kvm_ ? kvm_->n_computed(st.seq) : ext.pos0;
    res.n_computed = p0;
    res.n_blocks = kvm_ ? kvm_->n_seq_blocks(st.seq) : int32_t(ext.blocks.size());
    if (std::find(ids.begin(), ids.end(), st.seq) != ids.end()) {
      invalid("planned twice in one step");
      continue;
    }
    if (s->state == SeqState::kPaused) {
      invalid("paused");
      continue;
    }
    const int64_t n = int64_t(st.tokens.size());
    if (n == 0) {
      invalid("no tokens");
      continue;
    }
    if (st.n_outputs < 0 || st.n_outputs > n) {
      invalid("n_outputs = " + std::to_string(st.n_outputs) + " outside [0, " + std::to_string(n) + "]");
      continue;
    }
    if (st.logprobs > kMaxTopLogprobs) {
      invalid("logprobs = " + std::to_string(st.logprobs) + " above " + std::to_string(kMaxTopLogprobs));
      continue;
    }
    if (st.speculative && st.n_outputs != n) {
      invalid("a speculative entry needs an output after every token (n_outputs = tokens)");
      continue;
    }
    if (!kvm_) {
      if (p0 < 0) {
        invalid("position " + std::to_string(p0) + " is negative");
        continue;
      }
      if (int64_t(ext.blocks.size()) * bs < p0 + n) {
        invalid(std::to_string(ext.blocks.size()) + " blocks of " + std::to_string(bs) + " cannot hold " +
                std::to_string(p0 + n) + " positions");
        continue;
      }
      if (std::any_of(ext.blocks.begin(), ext.blocks.end(), [&](int32_t b) { return b < 0 || b >= n_kv_blocks; })) {
        invalid("a block id outside the KV cache's " + std::to_string(n_kv_blocks) + " blocks");
        continue;
      }
      if (s->n_accepted < p0 && int64_t(ext.history.size()) < p0) {
        invalid("history of " + std::to_string(ext.history.size()) + " tokens does not reach position " +
                std::to_string(p0));
        continue;
      }
    }
    if (p0 + n > max_seq_len_) {
      invalid(std::to_string(p0) + " + " + std::to_string(n) + " tokens exceed max_seq_len " +
              std::to_string(max_seq_len_));
      continue;
    }
    const auto bad = std::find_if(st.tokens.begin(), st.tokens.end(),
                                  [&](int32_t t) { return t < 0 || t >= n_vocab_; });
    if (bad != st.tokens.end()) {
      invalid("token id " + std::to_string(*bad) + " outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
      continue;
    }
    if (kvm_ && !kvm_->reserve(st.seq, n, &copies)) {
      res.outcome = SeqOutcome::kNoRoom;
      continue;
    }
    if (!kvm_) catch_up(*s, ext.history, p0);
    ids.push_back(st.seq);
    items.push_back({s, i, p0, 0, kvm_ ? kvm_->blocks(st.seq) : ext.blocks});
  }
  for (const kv::BlockCopy& c : copies) kv_->copy_block(c.src, c.dst);
  r.stats.n_cow_copies = int32_t(copies.size());

  // 2. One flat batch: every token of every sequence, in plan order.
  b_tokens_.clear();
  b_pos_.clear();
  b_seq_.clear();
  b_out_.clear();
  b_views_.clear();
  for (Item& it : items) {
    const SeqStep& st = plan.seqs[it.entry];
    const int32_t view = int32_t(b_views_.size());
    b_views_.push_back(KvSeqView{it.blocks, opts_.block_size});
    it.out0 = int64_t(b_out_.size());
    const int64_t n = int64_t(st.tokens.size()), first_out = n - st.n_outputs;
    for (int64_t j = 0; j < n; ++j) {
      if (j >= first_out) b_out_.push_back(int32_t(b_tokens_.size()));
      b_tokens_.push_back(st.tokens[size_t(j)]);
      b_pos_.push_back(int32_t(it.p0 + j));
      b_seq_.push_back(view);
    }
  }
  const int64_t n_total = int64_t(b_tokens_.size()), n_out = int64_t(b_out_.size());
  if (logits_.size() < size_t(n_out * n_vocab_)) logits_.resize(size_t(n_out * n_vocab_));

  // 3. Forward passes of at most max_step_tokens tokens. A sequence's tokens may straddle
  // two passes: the first writes its KV before the second reads it.
  const int64_t tf0 = now_ns();
  std::vector<int32_t> rel_out;
  size_t o = 0;
  for (int64_t w0 = 0; w0 < n_total; w0 += opts_.max_step_tokens) {
    const int64_t w1 = std::min(n_total, w0 + opts_.max_step_tokens);
    const size_t o_begin = o;
    rel_out.clear();
    while (o < b_out_.size() && b_out_[o] < w1) rel_out.push_back(int32_t(b_out_[o++] - w0));
    ForwardBatch fb;
    fb.tokens = std::span<const int32_t>(b_tokens_.data() + w0, size_t(w1 - w0));
    fb.positions = std::span<const int32_t>(b_pos_.data() + w0, size_t(w1 - w0));
    fb.seq = std::span<const int32_t>(b_seq_.data() + w0, size_t(w1 - w0));
    fb.seqs = b_views_;
    fb.out_rows = rel_out;
    fb.logits = logits_.data() + int64_t(o_begin) * n_vocab_;
    fb.interrupt = plan.interruptible ? interrupt_ : nullptr;
    const bool done = model_.arch().forward(fb, *kv_, *ws_, model_.pool());
    ++r.stats.n_forward;
    if (!done) {
      r.stats.interrupted = true;
      break;
    }
  }
  r.stats.forward_ns = now_ns() - tf0;

  // 3b. Interrupted: nothing is committed. The blocks reserved for this step's tokens go
  // back (a block copied on write keeps its copy: same content below p0); the cells
  // written beyond p0 are overwritten when the tokens are computed again.
  if (r.stats.interrupted) {
    for (const Item& it : items) {
      const SeqStep& st = plan.seqs[it.entry];
      if (kvm_) kvm_->release_unused(st.seq);
      SeqResult& res = r.seqs[it.entry];
      res.outcome = SeqOutcome::kInterrupted;
      res.n_computed = it.p0;
      res.n_blocks = kvm_ ? kvm_->n_seq_blocks(st.seq) : int32_t(it.blocks.size());
    }
  }

  // 4. Sample, commit the tokens, register newly full blocks (none of it when interrupted).
  // Sequences sample independently (each has its own sampler), so with many outputs over
  // a large vocabulary they sample in parallel (greedy reads every logit: 16 sequences of
  // Gemma 3 read 16 MB); the commit that touches the block pool follows in order.
  const std::span<const Item> commit = r.stats.interrupted ? std::span<const Item>() : std::span<const Item>(items);
  struct Sampled {
    int64_t n_keep = 0;  // tokens committed: all, or up to the last matching draft
    int32_t n_drafted = 0, n_draft_accepted = 0;
  };
  std::vector<Sampled> sampled(commit.size());
  auto sample_item = [&](size_t k) {
    const Item& it = commit[k];
    const SeqStep& st = plan.seqs[it.entry];
    SeqResult& res = r.seqs[it.entry];
    Seq& s = *it.s;
    Sampled& out = sampled[k];
    const int64_t n = int64_t(st.tokens.size()), first_out = n - st.n_outputs;
    res.sampled.reserve(size_t(st.n_outputs));
    out.n_keep = n;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = it.p0 + j;
      if (pos >= s.n_accepted) {  // recomputed tokens (after preemption) were seen already
        s.sampler->accept(st.tokens[size_t(j)]);
        s.n_accepted = pos + 1;
      }
      if (j < first_out) continue;
      const float* row = logits_.data() + (it.out0 + j - first_out) * n_vocab_;
      const int32_t t = s.sampler->sample(std::span<const float>(row, size_t(n_vocab_)));
      res.sampled.push_back(t);
      if (st.logprobs >= 0) res.logprobs.push_back(output_logprob(std::span<const float>(row, size_t(n_vocab_)), t, st.logprobs));
      if (st.speculative && j + 1 < n) {
        ++out.n_drafted;
        if (t != st.tokens[size_t(j + 1)]) {  // the first rejected draft: stop here
          out.n_drafted += int32_t(n - j - 2);
          out.n_keep = j + 1;
          break;
        }
        ++out.n_draft_accepted;
      }
    }
  };
  constexpr int64_t kParallelSampleLogits = int64_t(1) << 18;
  if (commit.size() > 1 && n_out * n_vocab_ >= kParallelSampleLogits && model_.pool().n_threads() > 1) {
    model_.pool().parallel_for(int64_t(commit.size()), 1, [&](int64_t b, int64_t e, int) {
      for (int64_t k = b; k < e; ++k) sample_item(size_t(k));
    });
  } else {
    for (size_t k = 0; k < commit.size(); ++k) sample_item(k);
  }
  for (size_t k = 0; k < commit.size(); ++k) {
    const Item& it = commit[k];
    const SeqStep& st = plan.seqs[it.entry];
    SeqResult& res = r.seqs[it.entry];
    const int64_t n_keep = sampled[k].n_keep;
    r.stats.n_drafted += sampled[k].n_drafted;
    r.stats.n_draft_accepted += sampled[k].n_draft_accepted;
    // The tokens up to the last matching draft are committed; the caller that owns the
    // blocks (external_kv) commits the same count into its KvManager.
    if (kvm_) kvm_->commit(st.seq, std::span<const int32_t>(st.tokens).first(size_t(n_keep)), n_keep);
    res.n_computed = it.p0 + n_keep;
    res.n_blocks = kvm_ ? kvm_->n_seq_blocks(st.seq) : int32_t(it.blocks.size());
    ++r.stats.n_seqs;
  }

  last_rows_.assign(plan.seqs.size(), {0, 0});
  for (const Item& it : commit) last_rows_[it.entry] = {it.out0, plan.seqs[it.entry].n_outputs};
  if (!r.stats.interrupted) {
    r.stats.n_tokens = n_total;
    r.stats.n_outputs = int32_t(n_out);
  }
  const KvStats kvs = kv_stats();
  r.stats.kv_blocks_total = kvs.total;
  r.stats.kv_blocks_used = kvs.used;
  r.stats.kv_blocks_cached = kvs.cached;
  r.stats.kv_blocks_free = kvs.free;
  r.stats.time_ns = now_ns() - t0;
  return r;
}

std::span<const float> Engine::last_logits(size_t entry) const {
  if (entry >= last_rows_.size() || last_rows_[entry].second == 0) return {};
  const auto [row, n] = last_rows_[entry];
  return std::span<const float>(logits_.data() + row * n_vocab_, size_t(n * n_vocab_));
}

}  // namespace ts::engine
