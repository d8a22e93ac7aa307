// OpenAI response objects and SSE framing, as plain functions of plain data (golden-tested
// without sockets).
//
//   non-streamed:  chat.completion / text_completion with choices[0], usage, service_tier
//                  and the tierserve extension object
//   streamed:      "data: {chunk}\n\n" per event (chat.completion.chunk / text_completion),
//                  a final chunk with finish_reason, an optional usage chunk (choices []),
//                  then "data: [DONE]\n\n"; tier changes as SSE comments (": ...\n\n"),
//                  which SSE clients, the OpenAI SDK among them, ignore.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_request.h"

namespace ts::server {

// What the server knows about how a request was served (the "tierserve" object).
struct ServedInfo {
  std::string tier_requested;
  std::string tier_served;
  std::string service_tier;     // OpenAI's value of tier_served (priority, default, flex, ...)
  std::string degraded_reason;  // "" when served as requested
  double queue_ms = 0;
  double ttft_ms = 0;
  int32_t preemptions = 0;
  // Interrupting tiers only (-1: not reported): serving::Timings::steps_behind*.
  int32_t steps_behind = -1;
  int32_t steps_behind_after_max_wait = -1;
};

struct UsageInfo {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
};

// Log-probabilities of output tokens (requests with logprobs). `token` is the token's
// text piece (bytes: a piece may hold part of a UTF-8 character; JSON strings replace
// such bytes, the "bytes" arrays keep them).
struct TokenLogprobInfo {
  std::string token;
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;  // most likely first
};
struct LogprobsInfo {
  std::vector<TokenLogprobInfo> tokens;
  int64_t text_offset = 0;  // completions: byte offset of the first token's piece in the output
};

struct ResponseHead {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;        // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;   // Unix seconds
  std::string model;
};

// The whole non-streamed response body.
// `logprobs` (null: the request did not ask) becomes choices[0].logprobs: for chat
// {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}],
// "refusal": null}; for completions {tokens, token_logprobs, top_logprobs: [{piece:
// logprob}], text_offset}.
std::string completion_body(const ResponseHead& h, const std::string& text, const std::string& finish_reason,
                            const UsageInfo& u, const ServedInfo& s, const LogprobsInfo* logprobs = nullptr);

// One streamed chunk's JSON. For chat, `first` adds the assistant role to the delta;
// finish_reason "" is null; `service_tier` is OpenAI's value of the serving tier. With
// `usage_null` (stream_options.include_usage) the chunk carries "usage": null, as OpenAI's
// do until the usage chunk.
std::string chunk_json(const ResponseHead& h, const std::string& text, bool first, const std::string& finish_reason,
                       const std::string& service_tier, const LogprobsInfo* logprobs = nullptr, bool usage_null = false);
// The usage chunk (choices empty) sent before [DONE] with stream_options.include_usage;
// it also carries the tierserve object.
std::string usage_chunk_json(const ResponseHead& h, const UsageInfo& u, const ServedInfo& s);

// SSE framing.
std::string sse_data(std::string_view payload);  // "data: <payload>\n\n"
std::string sse_comment(std::string_view text);  // ": <text>\n\n", newlines in text replaced
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// A fresh response id: prefix + 24 hex digits (random, unique enough for logs and clients).
std::string make_response_id(Endpoint ep);

}  // namespace ts::server
