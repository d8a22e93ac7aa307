// One request as the engine loop sees it: its token ids (the scheduler only has counts),
// its output text on the way out (detokenization, stop strings, what was already
// streamed), its timings, and the callback that hears about it.
//
// Owned and touched only by the loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "serving/service.h"
#include "tokenizer/text_output.h"
#include "tokenizer/tokenizer.h"

namespace ts::serving {

// Why a request ended, as the loop decides it after a sampled token: an end-of-generation
// token or a stop string (kStop), max_tokens (kLength).
enum class EndKind : uint8_t { kNone, kStop, kLength };

struct RequestState {
  // max_tokens: after the service's caps.
  RequestState(RequestId id, GenerateRequest req, Callback cb, const tok::Tokenizer& tok, int64_t arrival_ns,
               int64_t max_tokens);

  RequestId id;
  GenerateRequest req;
  Callback cb;
  sched::TierId tier_label = 0;   // the requested tier: the label of its metrics
  sched::TierId tier_served = 0;  // as last reported to the client
  int64_t max_tokens = 0;         // after the service's caps

  // Tokens: prompt + generated (the scheduler knows which of them are in KV).
  std::vector<int32_t> known;
  int64_t n_generated = 0;
  int64_t n_cached_prompt = 0;    // reused from the prefix cache at the first start
  bool computed_once = false;     // a step computed something for it

  // Times (clock nanoseconds).
  int64_t arrival_ns = 0;
  int64_t first_step_ns = -1;
  int64_t last_notice_ns = -1;  // last kWaiting (arrival before the first)
  int32_t steps_behind = -1, steps_behind_late = -1;  // Timings::steps_behind*
  int64_t first_token_ns = -1;
  int32_t n_preemptions = 0;
  int32_t n_undelivered = 0;      // tokens whose text is held back (next kDelta counts them)

  // Speculative decoding (loop.cc add_drafts): draft length adapted to what this request
  // accepted (longer after a full acceptance, shorter after a partial one), and after a
  // step that accepted nothing no drafts for spec_cooldown steps (1, 2, 4 .. 16 in a row).
  int32_t spec_k = 2;
  int32_t spec_cooldown = 0;
  int32_t spec_backoff = 1;

  std::vector<TokenLogprob> pending_logprobs;  // computed, not yet delivered

  bool admitted = false;
  bool ended = false;             // its final callback was delivered

  // Appends a sampled token. Returns the text that may be streamed now (possibly empty)
  // and sets *end when the request is over (tok::TextOutput, the one `tierserve run`
  // uses): EOS/EOG (unless ignore_eos) or a stop string -> kStop, max_tokens -> kLength.
  // At the end the returned text includes everything held back, cut before a stop string.
  std::string push_token(int32_t token, EndKind* end);

 private:
  tok::TextOutput text_;
};

}  // namespace ts::serving
