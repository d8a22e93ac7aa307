// Parsing and validating OpenAI request bodies (POST /v1/chat/completions and
// /v1/completions) into plain data. Untrusted input: every problem is an ApiError (400)
// naming the field, never an exception or a crash. Fuzzed by fuzz/request_fuzz.cc.
//
// Accepted: model, messages (roles system/developer/user/assistant; content a string or
// an array of {"type":"text"} parts), prompt (a string, an array of exactly one string,
// an array of token ids or an array of exactly one such array), max_tokens / max_completion_tokens, temperature, top_p, top_k, min_p,
// frequency_penalty, presence_penalty, repetition_penalty (alias repeat_penalty), stop
// (string or array), seed, n (1 only), stream, stream_options.include_usage, user,
// service_tier, ignore_eos, logprobs (chat: true/false with top_logprobs 0..20;
// completions: an integer 0..5 of alternatives), logit_bias (token id strings -> -100..100;
// ids past the vocabulary are refused where the vocabulary is known). Refused with a clear
// message: n > 1, best_of > 1, tools, functions, echo, suffix, response_format other than
// text. Other fields are ignored, as most OpenAI-compatible servers do.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/api_error.h"
#include "tokenizer/chat.h"

namespace ts::server {

enum class Endpoint : uint8_t { kChat, kCompletions };

// Sampling for the fields a request leaves out: OpenAI's defaults (temperature 1, top_p 1,
// the rest off) unless the server's config sets the model's own (model.sampling), as a
// model's generation config does elsewhere.
struct SamplingDefaults {
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
};

struct RequestLimits {
  int64_t max_tokens_cap = 1 << 20;  // largest max_tokens accepted
  int32_t max_stop_strings = 16;
  int32_t max_messages = 1024;
  int32_t max_json_depth = 64;
  int32_t max_logit_bias = 1024;  // entries of logit_bias
  SamplingDefaults defaults;       // for the sampling fields a request leaves out
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<tok::ChatMessage> messages;  // kChat ("developer" is stored as "system")
  std::string prompt;                      // kCompletions: text, or
  std::vector<int32_t> prompt_tokens;      // kCompletions: token ids (ids >= 0; the vocabulary is checked later)
  std::optional<int64_t> max_tokens;       // >= 1 and <= the cap when given
  // Sampling: RequestLimits::defaults for what the request leaves out.
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t top_k = 0;
  double min_p = 0.0;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  double repetition_penalty = 1.0;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;           // empty strings dropped
  bool stream = false;
  bool include_usage = false;
  bool ignore_eos = false;
  std::string user;
  std::optional<std::string> service_tier; // as given; mapped to a tier by the handler
  std::optional<int64_t> priority;         // an int32; higher = more urgent (tier_names.h)
  // -1: no logprobs; else log-probabilities of the output tokens with this many
  // alternatives each (chat: logprobs true + top_logprobs; completions: logprobs N).
  int32_t logprobs = -1;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id (>= 0) -> bias in [-100, 100]
};

// Parses `body` as JSON and validates it; returns nothing and fills `out`, or the error.
std::optional<ApiError> parse_completion_request(std::string_view body, Endpoint ep, const RequestLimits& limits,
                                                 CompletionRequest& out);

// Deepest nesting of arrays/objects in a JSON text (strings skipped); stops counting at
// `limit` + 1. Checked before parsing so a pathological body costs one pass.
int32_t json_depth(std::string_view text, int32_t limit);

}  // namespace ts::server
