// The engine side of the step contract (docs/architecture.md): plain data in, plain data out.
//
//   plan   = scheduler.schedule(now)        sched::  (no model, no engine headers)
//   step   = serving: translate(plan)       -> engine::StepPlan (token ids, output wishes)
//   result = engine.step(step)              -> engine::StepResult
//   scheduler.update(plan, summary)         serving copies the counts sched needs
//
// `sched` must not depend on `engine`, so these types use only the standard library and
// name sequences by an opaque id the caller chooses (serving uses its request id). A
// sequence has n_computed tokens in the KV cache; a step appends tokens at positions
// n_computed.. of each planned sequence, whatever they are: a chunk of prompt, one decode
// token, a recomputation after preemption, or several speculative tokens. There are no
// prefill/decode modes: all planned tokens of all sequences run as one batch (split into
// forward passes of at most EngineOptions::max_step_tokens tokens).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace ts::engine {

using SeqId = uint64_t;

// What one sequence computes in a step.
struct SeqStep {
  SeqId seq = 0;
  // Tokens appended at positions n_computed..n_computed+size-1 (at least one).
  std::vector<int32_t> tokens;
  // Outputs after the last n_outputs tokens: 0 for a prompt chunk that is not the last,
  // 1 to sample the next token, k > 1 to verify k-1 speculative tokens (a sampled token
  // after each of them). At most tokens.size().
  int32_t n_outputs = 1;
  // >= 0: each sampled token's log-probability and the `logprobs` most likely tokens with
  // theirs (at most kMaxTopLogprobs), computed here from the row; no row is copied out
  // (tests and tools that want rows read Engine::last_logits).
  int32_t logprobs = -1;
  // Speculative verification: tokens = [the last sampled token, draft_1, ..., draft_k]
  // with n_outputs = tokens.size(). Row j's sample is drawn only while every draft before
  // it matched: sampled = s_0 .. s_i where s_j == draft_{j+1} for j < i and s_i is the
  // first mismatch (or the last row). Only the tokens up to the last matching draft are
  // committed (n_computed grows by i + 1; the KV of rejected drafts is dropped). The
  // sampler sees exactly the accept/sample calls of plain decoding, one token at a time,
  // so the output equals plain decoding (greedy and seeded sampling alike).
  bool speculative = false;
};

// Where one sequence's KV lives, for an engine with EngineOptions::external_kv (the
// scheduler owns the blocks): its first position (its n_computed), its block table (room
// for pos0 + tokens positions, allocated by the caller) and its tokens before pos0 (the
// sampler's history: at least those it has not seen, e.g. a prefix reused from the cache).
// Views: the caller keeps them alive through step().
struct SeqKv {
  int64_t pos0 = 0;
  std::span<const int32_t> blocks;
  std::span<const int32_t> history;
};

struct StepPlan {
  // In order. An engine that owns its blocks answers kNoRoom for later entries first when
  // they run out; with external_kv the caller allocated them all.
  std::vector<SeqStep> seqs;
  // The step may be abandoned at a layer boundary when the engine's interrupt flag
  // (Engine::set_interrupt_flag) is raised: nothing is committed, every computed entry
  // answers kInterrupted, and the caller plans it again.
  bool interruptible = false;
  // external_kv: one per entry of seqs, same order.
  std::vector<SeqKv> kv;
  // external_kv: (src, dst) blocks to copy before the step (copy-on-write of a shared
  // block the step writes into), in order.
  std::vector<std::pair<int32_t, int32_t>> copies;
};

enum class SeqOutcome : uint8_t {
  kOk,       // computed; outputs filled
  kNoRoom,   // not computed: not enough free KV blocks (nothing changed; pause/preempt
             // something and plan it again)
  kInvalid,  // not computed: unknown, paused or duplicated sequence, bad token id,
             // n_outputs out of range, sequence longer than max_seq_len (see `error`)
  kInterrupted,  // not computed: the step was interrupted (nothing changed, plan it again)
};

const char* seq_outcome_name(SeqOutcome o);

inline constexpr int32_t kMaxTopLogprobs = 20;

// log softmax of an output row: the sampled token's, and the most likely tokens' (highest
// first, the lower id first on ties).
struct OutputLogprob {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (token id, log-probability)
};

struct SeqResult {
  SeqId seq = 0;
  SeqOutcome outcome = SeqOutcome::kOk;
  std::string error;             // why, for kInvalid
  int64_t n_computed = 0;        // tokens in the KV cache after the step
  int32_t n_blocks = 0;          // KV blocks the sequence holds after the step
  std::vector<int32_t> sampled;  // one per output row, in position order
  std::vector<OutputLogprob> logprobs;  // one per sampled token when SeqStep::logprobs >= 0
};

struct StepStats {
  int64_t n_tokens = 0;          // tokens computed (all sequences)
  int32_t n_seqs = 0;            // sequences computed
  int32_t n_outputs = 0;         // output rows (logits computed, tokens sampled)
  int32_t n_forward = 0;         // forward passes the step took
  int32_t n_cow_copies = 0;      // blocks copied because a shared block was written
  int32_t n_drafted = 0;         // draft tokens verified (speculative entries)
  int32_t n_draft_accepted = 0;  // of which matched the sampled token
  bool interrupted = false;      // abandoned at a layer boundary (StepPlan::interruptible)
  int64_t time_ns = 0;           // wall time of step() (forward + sampling)
  int64_t forward_ns = 0;        // of which the forward passes
  // KV pool after the step, in blocks of block_size cells.
  int32_t kv_blocks_total = 0;
  int32_t kv_blocks_used = 0;    // referenced by sequences
  int32_t kv_blocks_cached = 0;  // unreferenced reusable prefixes (reclaimable)
  int32_t kv_blocks_free = 0;
};

struct StepResult {
  std::vector<SeqResult> seqs;   // one per plan entry, same order
  StepStats stats;
};

}  // namespace ts::engine
