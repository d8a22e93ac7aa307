// Drafts for speculative decoding without a draft model ("prompt lookup"): when the last
// few tokens of a request occurred earlier in its prompt or output, the tokens that
// followed them there are a cheap guess of what comes next. Text that quotes, copies or
// edits its input (summaries, code changes, extraction, repeated structure) is full of
// such runs. The engine verifies the guess in one step (engine::SeqStep::speculative);
// the output is the same as plain decoding whatever the guess.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ts::serving {

struct DraftOptions {
  int32_t max_drafts = 4;  // tokens proposed at most
  int32_t max_ngram = 3;   // longest suffix looked up
  int32_t min_ngram = 2;   // shortest suffix that counts as a match
};

// The tokens that followed the most recent earlier occurrence of the longest suffix of
// `known` (max_ngram down to min_ngram tokens) that occurred before; empty when none did.
// At most o.max_drafts tokens, and never past the end of `known`.
std::vector<int32_t> propose_drafts(std::span<const int32_t> known, const DraftOptions& o);

}  // namespace ts::serving
