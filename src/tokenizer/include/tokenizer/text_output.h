// A sequence's generated text on its way out, shared by `tierserve run` and the serving
// loop so that both end a generation the same way: tokens are detokenized as a stream
// (UTF-8 held back until complete), stop strings are searched in the text, and the text
// that may already be shown is what can no longer turn into a stop string.
//
// check_stop is the pure function underneath: the CLI, the server and the scheduler agree
// on when a sequence ends and which text may already be streamed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ts::tok {

struct StopCheck {
  bool stopped = false;  // some stop string occurs in the text
  // stopped: the text to keep is text[0, end) (everything before the earliest stop
  // string). Otherwise: text[0, end) is safe to emit; the rest could still become the
  // start of a stop string and must be held back.
  size_t end = 0;
};

// Checks `text` against `stops` (empty stop strings are ignored). Only occurrences that
// end at or after `new_from` are searched for (text before it was checked by an earlier
// call), so checking after each token costs O(new text + longest stop).
StopCheck check_stop(std::string_view text, std::span<const std::string> stops, size_t new_from = 0);

// Why a generation ended after a token.
enum class TextEnd : uint8_t {
  kNone,        // not over
  kEog,         // an end-of-generation token (not text, not counted as output)
  kStopString,  // a stop string appeared: the text ends before it
  kLength,      // max_tokens output tokens
};

class TextOutput {
 public:
  // max_tokens <= 0: no length limit. `tok` and `stops` are copied as needed; `tok` must
  // outlive this.
  TextOutput(const Tokenizer& tok, std::vector<std::string> stops, bool ignore_eos, int64_t max_tokens);

  // One sampled token. Returns the text that may be shown now (possibly empty) and sets
  // *end; once over, the returned text includes everything held back, cut before a stop
  // string, and later calls return nothing.
  std::string push(TokenId token, TextEnd* end);
  // The generation ends for a reason outside the text (the context is full, an error):
  // the held-back text, flushed and cut at a stop string.
  std::string finish();

  // Output tokens so far (an end-of-generation token is not one).
  int64_t n_tokens() const { return n_tokens_; }
  bool over() const { return over_; }
  // Every byte returned so far (== the final text once over).
  const std::string& shown() const { return shown_; }

 private:
  std::string take(size_t end);
  std::string flush_and_take();

  const Tokenizer& tok_;
  StreamDecoder decoder_;
  std::vector<std::string> stops_;
  bool ignore_eos_ = false;
  int64_t max_tokens_ = 0;
  int64_t n_tokens_ = 0;
  bool over_ = false;
  std::string text_;   // all decoded text so far
  std::string shown_;  // its prefix that was returned
};

}  // namespace ts::tok
