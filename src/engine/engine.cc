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
  e->pool_ = std::make_unique<kv::BlockPool>(int32_t(n_blocks), opts.block_size);
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

uint64_t Engine::root_hash(const Seq& s) const {
  return kv::prefix_root_hash(opts_.share_prefixes ? 0 : s.cfg.isolation_key);
}

// --- sequence life cycle -----------------------------------------------------------------

Status Engine::add(SeqId id, const SeqConfig& cfg) {
  if (seqs_.count(id)) return invalid_argument("sequence " + std::to_string(id) + " already exists");
  TS_RETURN_IF_ERROR(validate(cfg.sampling));
  Seq& s = seqs_[id];
  s.cfg = cfg;
  s.sampler = std::make_unique<Sampler>(cfg.sampling);
  return Status::ok();
}

Result<int64_t> Engine::reuse_prefix(SeqId id, std::span<const int32_t> tokens) {
  Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  if (!s->tokens.empty())
    return failed_precondition("sequence " + std::to_string(id) + " already has " + std::to_string(s->tokens.size()) +
                               " tokens computed");
  if (!opts_.prefix_cache || tokens.size() < 2) return int64_t(0);
  const int64_t bs = opts_.block_size;
  // Whole blocks, leaving at least the last token to compute (it yields the logits).
  const int64_t n_full = std::min<int64_t>((int64_t(tokens.size()) - 1) / bs, max_seq_len_ / bs);
  uint64_t parent = root_hash(*s);
  for (int64_t i = 0; i < n_full; ++i) {
    const std::span<const int32_t> blk = tokens.subspan(size_t(i * bs), size_t(bs));
    const int32_t b = pool_->acquire_cached(parent, blk);
    if (b < 0) break;
    parent = kv::prefix_block_hash(parent, blk);
    s->blocks.push_back(b);
    s->hashes.push_back(parent);
    s->tokens.insert(s->tokens.end(), blk.begin(), blk.end());
  }
  for (int64_t p = s->n_accepted; p < int64_t(s->tokens.size()); ++p) s->sampler->accept(s->tokens[size_t(p)]);
  s->n_accepted = std::max<int64_t>(s->n_accepted, int64_t(s->tokens.size()));
  return int64_t(s->tokens.size());
}

Status Engine::fork(SeqId src, SeqId dst, const SeqConfig& cfg) {
  const Seq* s = find(src);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(src));
  if (seqs_.count(dst)) return invalid_argument("sequence " + std::to_string(dst) + " already exists");
  TS_RETURN_IF_ERROR(validate(cfg.sampling));
  Seq d;
  d.cfg = cfg;
  d.cfg.isolation_key = s->cfg.isolation_key;  // the shared KV was computed under src's key
  d.blocks = s->blocks;
  for (int32_t b : d.blocks) pool_->retain(b);
  d.tokens = s->tokens;
  d.hashes = s->hashes;
  d.sampler = std::make_unique<Sampler>(cfg.sampling);
  for (int32_t t : d.tokens) d.sampler->accept(t);
  d.n_accepted = int64_t(d.tokens.size());
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

void Engine::release_blocks(Seq& s, size_t keep_blocks) {
  // Tail first: among blocks that become cached, a sequence's later blocks are reclaimed
  // before its earlier ones (an early block is useful to more future prompts).
  while (s.blocks.size() > keep_blocks) {
    pool_->release(s.blocks.back());
    s.blocks.pop_back();
  }
}

Status Engine::preempt(SeqId id) {
  Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  release_blocks(*s, 0);
  s->tokens.clear();
  s->hashes.clear();
  ++s->n_preemptions;
  return Status::ok();
}

Status Engine::truncate(SeqId id, int64_t n_keep) {
  Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  if (n_keep < 0 || n_keep > int64_t(s->tokens.size()))
    return invalid_argument("truncate to " + std::to_string(n_keep) + " tokens: sequence " + std::to_string(id) +
                            " has " + std::to_string(s->tokens.size()));
  const int64_t bs = opts_.block_size;
  release_blocks(*s, size_t(ceil_div(n_keep, bs)));
  s->tokens.resize(size_t(n_keep));
  s->hashes.resize(std::min(s->hashes.size(), size_t(n_keep / bs)));
  // A kept partial block may still be registered (it was full): reserve() unregisters or
  // copies it before the next write.
  return Status::ok();
}

Status Engine::remove(SeqId id) {
  Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  release_blocks(*s, 0);
  seqs_.erase(id);
  return Status::ok();
}

Result<SeqInfo> Engine::info(SeqId id) const {
  const Seq* s = find(id);
  if (!s) return invalid_argument("unknown sequence " + std::to_string(id));
  SeqInfo i;
  i.state = s->state;
  i.n_computed = int64_t(s->tokens.size());
  i.n_blocks = int32_t(s->blocks.size());
  i.n_preemptions = s->n_preemptions;
  return i;
}

KvStats Engine::kv_stats() const {
  KvStats k;
  k.block_size = opts_.block_size;
  k.total = pool_->n_blocks();
  k.used = pool_->n_used();
  k.cached = pool_->n_cached();
  k.free = pool_->n_free();
  k.bytes = kv_->bytes();
  return k;
}

void Engine::clear_prefix_cache() { pool_->clear_cache(); }

void Engine::touch_kv() { kv_->touch(); }

bool Engine::check_consistency() const {
  if (!pool_->check_consistency()) return false;
  std::vector<int32_t> refs(size_t(pool_->n_blocks()), 0);
  for (const auto& [id, s] : seqs_) {
    if (int64_t(s.blocks.size()) != ceil_div(int64_t(s.tokens.size()), opts_.block_size)) return false;
    for (int32_t b : s.blocks) ++refs[size_t(b)];
  }
  for (int32_t b = 0; b < pool_->n_blocks(); ++b)
    if (refs[size_t(b)] != pool_->ref_count(b)) return false;
  return true;
}

int64_t Engine::blocks_needed(SeqId id, int64_t n_new) const {
  const Seq* s = find(id);
  if (!s) return -1;
  const int64_t bs = opts_.block_size, p0 = int64_t(s->tokens.size());
  int64_t need = ceil_div(p0 + n_new, bs) - int64_t(s->blocks.size());
  if (p0 % bs != 0 && n_new > 0 && pool_->ref_count(s->blocks[size_t(p0 / bs)]) > 1) ++need;
  return std::max<int64_t>(0, need);
}

bool Engine::reserve(Seq& s, int64_t n_new, int32_t* n_copies) {
  const int64_t bs = opts_.block_size, p0 = int64_t(s.tokens.size());
  int64_t need = ceil_div(p0 + n_new, bs) - int64_t(s.blocks.size());
  const bool partial = p0 % bs != 0;
  const bool shared = partial && pool_->ref_count(s.blocks[size_t(p0 / bs)]) > 1;
  if (need + (shared ? 1 : 0) > pool_->n_available()) return false;
  if (partial) {
    int32_t& b = s.blocks[size_t(p0 / bs)];
    if (shared) {  // copy-on-write: the other holders keep the original
      const int32_t nb = pool_->allocate(p0 / bs > 0 ? s.blocks[size_t(p0 / bs - 1)] : -1);
      TS_CHECK(nb >= 0);
      kv_->copy_block(b, nb);
      pool_->release(b);
      b = nb;
      ++*n_copies;
    } else {
      pool_->unregister(b);  // ours alone, about to be overwritten (after a truncate)
    }
  }
  for (; need > 0; --need) {
    const int32_t nb = pool_->allocate(s.blocks.empty() ? -1 : s.blocks.back());
    TS_CHECK(nb >= 0);
    s.blocks.push_back(nb);
  }
  return true;
}

void Engine::register_full_blocks(Seq& s) {
  if (!opts_.prefix_cache) return;
  const size_t bs = size_t(opts_.block_size);
  while (s.hashes.size() < s.tokens.size() / bs) {
    const size_t i = s.hashes.size();
    const uint64_t parent = i ? s.hashes[i - 1] : root_hash(s);
    const std::span<const int32_t> blk(s.tokens.data() + i * bs, bs);
    pool_->register_block(s.blocks[i], parent, blk);  // false: an equal block is cached already
    s.hashes.push_back(kv::prefix_block_hash(parent, blk));
  }
}

// --- step --------------------------------------------------------------------------------

StepResult Engine::step(const StepPlan& plan) {
  const int64_t t0 = now_ns();
  StepResult r;
  r.seqs.resize(plan.seqs.size());

  // 1. Validate and reserve KV, in plan order.
  struct Item {
    Seq* s;
    size_t entry;
    int64_t p0;     // n_computed before the step
    int64_t out0;   // first output row in logits_
  };
  std::vector<Item> items;
  items.reserve(plan.seqs.size());
  std::vector<SeqId> ids;
  ids.reserve(plan.seqs.size());
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
    res.n_computed = int64_t(s->tokens.size());
    res.n_blocks = int32_t(s->blocks.size());
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
    if (int64_t(s->tokens.size()) + n > max_seq_len_) {
      invalid(std::to_string(s->tokens.size()) + " + " + std::to_string(n) + " tokens exceed max_seq_len " +
              std::to_string(max_seq_len_));
      continue;
    }
    const auto bad = std::find_if(st.tokens.begin(), st.tokens.end(),
                                  [&](int32_t t) { return t < 0 || t >= n_vocab_; });
    if (bad != st.tokens.end()) {
      invalid("token id " + std::to_string(*bad) + " outside the vocabulary [0, " + std::to_string(n_vocab_) + ")");
      continue;
    }
    if (!reserve(*s, n, &r.stats.n_cow_copies)) {
      res.outcome = SeqOutcome::kNoRoom;
      continue;
    }
    ids.push_back(st.seq);
    items.push_back({s, i, int64_t(s->tokens.size()), 0});
  }

  // 2. One flat batch: every token of every sequence, in plan order.
  b_tokens_.clear();
  b_pos_.clear();
  b_seq_.clear();
  b_out_.clear();
  b_views_.clear();
  for (Item& it : items) {
    const SeqStep& st = plan.seqs[it.entry];
    const int32_t view = int32_t(b_views_.size());
    b_views_.push_back(KvSeqView{std::span<const int32_t>(it.s->blocks), opts_.block_size});
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
      const int64_t bs = opts_.block_size;
      release_blocks(*it.s, size_t((it.p0 + bs - 1) / bs));
      SeqResult& res = r.seqs[it.entry];
      res.outcome = SeqOutcome::kInterrupted;
      res.n_computed = it.p0;
      res.n_blocks = int32_t(it.s->blocks.size());
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
    Seq& s = *it.s;
    const int64_t n = int64_t(st.tokens.size()), n_keep = sampled[k].n_keep;
    r.stats.n_drafted += sampled[k].n_drafted;
    r.stats.n_draft_accepted += sampled[k].n_draft_accepted;
    s.tokens.insert(s.tokens.end(), st.tokens.begin(), st.tokens.begin() + n_keep);
    if (n_keep < n) {
      const int64_t bs = opts_.block_size;
      release_blocks(s, size_t((it.p0 + n_keep + bs - 1) / bs));
    }
    register_full_blocks(s);
    res.n_computed = int64_t(s.tokens.size());
    res.n_blocks = int32_t(s.blocks.size());
    ++r.stats.n_seqs;
  }

  last_rows_.assign(plan.seqs.size(), {0, 0});
  for (const Item& it : commit) last_rows_[it.entry] = {it.out0, plan.seqs[it.entry].n_outputs};
  if (!r.stats.interrupted) {
    r.stats.n_tokens = n_total;
    r.stats.n_outputs = int32_t(n_out);
  }
  r.stats.kv_blocks_total = pool_->n_blocks();
  r.stats.kv_blocks_used = pool_->n_used();
  r.stats.kv_blocks_cached = pool_->n_cached();
  r.stats.kv_blocks_free = pool_->n_free();
  r.stats.time_ns = now_ns() - t0;
  return r;
}

std::span<const float> Engine::last_logits(size_t entry) const {
  if (entry >= last_rows_.size() || last_rows_[entry].second == 0) return {};
  const auto [row, n] = last_rows_[entry];
  return std::span<const float>(logits_.data() + row * n_vocab_, size_t(n * n_vocab_));
}

}  // namespace ts::engine
