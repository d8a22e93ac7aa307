// The continuous-batching engine: many sequences in one paged KV cache, advanced together
// by step(plan) (engine/step.h). One thread owns an Engine; nothing here is thread-safe.
//
// KV memory is one set of tensors of fixed-size blocks (ops/kv_cache.h) sized once from a
// byte budget. Who allocates the blocks is the caller's choice:
//   - external_kv (serving): the scheduler owns a kv::KvManager and allocates while it
//     plans; each SeqStep carries its block table, first position and history, and the
//     engine only maps those blocks onto the tensors (and makes the plan's copies);
//   - otherwise (tools, tests) the engine owns a kv::KvManager itself: blocks are
//     allocated as a sequence's tokens are computed, shared by fork() and by prefix
//     reuse, copied on the first write to a shared block, and released by preempt() and
//     remove(); full blocks are registered under a chained hash of their token prefix
//     (and the sequence's isolation key) and stay cached after a sequence ends, least
//     recently used first to go. A new sequence (or a preempted one coming back) reuses
//     them with reuse_prefix().
//
// Sequence life cycle, all under the caller's (the scheduler's) control:
//   add -> [reuse_prefix] -> step... -> remove               finish or cancel
//   pause / resume                                           kept in KV, not schedulable
//   preempt -> [reuse_prefix] -> step (recompute) ...        KV freed, state kept
//   fork                                                     shares the KV, copy-on-write
//   truncate                                                 drop rejected speculative KV
//
// Batched == solo: a sequence's tokens and logits do not depend on what else is in the
// step, on chunk sizes, on prefix reuse or on preemption (the forward pass and its
// kernels compute every row the same way whatever the batch). Sampling uses each
// sequence's own Sampler (parameters and seed).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/arch.h"
#include "ops/kv_cache.h"
#include "engine/model.h"
#include "engine/sampling.h"
#include "engine/step.h"
#include "kv/kv_manager.h"

namespace ts::engine {

struct EngineOptions {
  int32_t block_size = 16;         // KV cells per block
  // KV memory budget. 0: n_blocks decides.
  uint64_t kv_bytes = 0;
  // Blocks in the pool when kv_bytes is 0 (0 as well: enough for 4 sequences of max_seq_len).
  int64_t n_blocks = 0;
  // Tokens per forward pass (the workspace size); a larger step runs in several passes.
  int64_t max_step_tokens = 512;
  // Positions per sequence; 0: the model's training context (4096 when unknown).
  int64_t max_seq_len = 0;
  bool prefix_cache = true;
  // Reuse prefixes across isolation keys (one shared cache). Off: a sequence only ever
  // reuses blocks computed under its own key.
  bool share_prefixes = false;
  // The caller allocates the blocks (SeqStep::pos0/blocks/history, StepPlan::copies);
  // reuse_prefix, fork and truncate are refused, info() reports no KV.
  bool external_kv = false;
};

struct SeqConfig {
  SamplingParams sampling;
  uint64_t isolation_key = 0;      // e.g. a hash of the API key
};

enum class SeqState : uint8_t { kRunning, kPaused };

struct SeqInfo {
  SeqState state = SeqState::kRunning;
  int64_t n_computed = 0;          // tokens whose KV is in the cache
  int32_t n_blocks = 0;
  int32_t n_preemptions = 0;
};

struct KvStats {
  int32_t block_size = 0;
  int32_t total = 0, used = 0, cached = 0, free = 0;
  uint64_t bytes = 0;              // KV tensor memory
};

class Engine {
 public:
  // kInvalidArgument for options out of range; kResourceExhausted when the KV cache cannot
  // be allocated. `model` must outlive the engine.
  static Result<std::unique_ptr<Engine>> create(Model& model, const EngineOptions& opts = {});
  ~Engine();

  const EngineOptions& options() const { return opts_; }
  const Model& model() const { return model_; }
  int64_t max_seq_len() const { return max_seq_len_; }

  // kInvalidArgument when `id` exists or the sampling parameters are invalid.
  Status add(SeqId id, const SeqConfig& cfg);
  // For a sequence with nothing computed (new or preempted): attaches the cached blocks
  // that hold a prefix of `tokens` (whole blocks, always leaving the last token to be
  // computed so that it yields logits). Returns the new n_computed (0 when nothing
  // matched or the prefix cache is off); the caller plans tokens from there.
  Result<int64_t> reuse_prefix(SeqId id, std::span<const int32_t> tokens);
  // New sequence `dst` with src's KV and history (shared blocks, copied on write) and its
  // own sampling. Takes no blocks now. kInvalidArgument for unknown src or existing dst.
  Status fork(SeqId src, SeqId dst, const SeqConfig& cfg);
  // Paused sequences keep their KV but are rejected (kInvalid) by step().
  Status pause(SeqId id);
  Status resume(SeqId id);
  // Frees the sequence's KV (full blocks stay in the prefix cache); n_computed becomes 0
  // and the caller recomputes it later (same outputs: the sampler's history and random
  // state carry over and tokens already seen are not counted twice).
  Status preempt(SeqId id);
  // Keeps the first n_keep tokens (n_keep <= n_computed) and frees the rest.
  Status truncate(SeqId id, int64_t n_keep);
  // Finished or cancelled: frees the sequence (its full blocks stay cached).
  Status remove(SeqId id);

  bool contains(SeqId id) const { return seqs_.count(id) != 0; }
  Result<SeqInfo> info(SeqId id) const;
  int64_t n_seqs() const { return int64_t(seqs_.size()); }
  KvStats kv_stats() const;
  // KV blocks appending n_new tokens to `id` would take now (new blocks + copy-on-write);
  // -1 for an unknown sequence or with external_kv.
  int64_t blocks_needed(SeqId id, int64_t n_new) const;
  // Drops all cached prefixes (tests, memory pressure from outside).
  void clear_prefix_cache();
  // KvCache::touch: the whole cache's pages faulted in now rather than by the steps that
  // first write them (benchmarks; llama.cpp clears its KV buffer when it creates it).
  void touch_kv();
  // Pool invariants plus: the references held by sequences equal every block's count.
  bool check_consistency() const;

  StepResult step(const StepPlan& plan);
  // The logits rows (n_outputs x n_vocab) of plan entry `entry` of the last step, without
  // the copy return_logits makes; empty for an entry that was not computed. Valid until
  // the next step().
  std::span<const float> last_logits(size_t entry) const;

  // The flag interruptible steps watch (between layers): another thread raises it when
  // work arrives that must not wait for the step in flight. Not owned; null: none.
  void set_interrupt_flag(const std::atomic<bool>* flag) { interrupt_ = flag; }

 private:
  struct Seq {
    SeqConfig cfg;
    SeqState state = SeqState::kRunning;
    std::unique_ptr<Sampler> sampler;
    int64_t n_accepted = 0;         // tokens the sampler has seen (survives preemption)
    int32_t n_preemptions = 0;
  };

  Engine(Model& model, const EngineOptions& opts) : model_(model), opts_(opts) {}
  Status own_kv(const char* what) const;
  void catch_up(Seq& s, std::span<const int32_t> history, int64_t upto);
  Seq* find(SeqId id);
  const Seq* find(SeqId id) const;

  Model& model_;
  EngineOptions opts_;
  int64_t max_seq_len_ = 0;
  int64_t n_vocab_ = 0;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<kv::KvManager> kvm_;  // null with external_kv
  std::unique_ptr<Workspace> ws_;
  std::unordered_map<SeqId, Seq> seqs_;
  const std::atomic<bool>* interrupt_ = nullptr;

  // Per-step buffers, reused.
  std::vector<int32_t> b_tokens_, b_pos_, b_seq_, b_out_;
  std::vector<KvSeqView> b_views_;
  std::vector<float> logits_;
  std::vector<std::pair<int64_t, int64_t>> last_rows_;  // per plan entry: first row, rows
};

}  // namespace ts::engine
