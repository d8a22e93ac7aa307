// libFuzzer target: the OpenAI request parser (server/openai_request.h) on arbitrary
// bytes, as both endpoints. Untrusted input must end in a request or an ApiError, never a
// crash, a hang or an exception; the checks below are the parser's contract.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "server/openai_request.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void one(std::string_view body, ts::server::Endpoint ep) {
  ts::server::RequestLimits lim;
  lim.max_tokens_cap = 4096;
  lim.max_stop_strings = 4;
  lim.max_messages = 8;
  lim.max_json_depth = 16;
  ts::server::CompletionRequest r;
  const auto err = ts::server::parse_completion_request(body, ep, lim, r);
  if (err) {
    check(err->status == 400);
    check(!err->message.empty());
    // The error object is always valid JSON (messages may quote invalid input).
    check(!nlohmann::json::parse(err->to_json(), nullptr, false).is_discarded());
    return;
  }
  check(!r.max_tokens || (*r.max_tokens >= 1 && *r.max_tokens <= lim.max_tokens_cap));
  check(r.temperature >= 0.0 && r.temperature <= 2.0);
  check(r.top_p >= 0.0 && r.top_p <= 1.0);
  check(r.min_p >= 0.0 && r.min_p <= 1.0);
  check(r.top_k >= 0);
  check(int64_t(r.stop.size()) <= lim.max_stop_strings);
  for (const auto& s : r.stop) check(!s.empty());
  check(!r.include_usage || r.stream);
  if (ep == ts::server::Endpoint::kChat) {
    check(!r.messages.empty() && int64_t(r.messages.size()) <= lim.max_messages);
    for (const auto& m : r.messages) check(m.role == "system" || m.role == "user" || m.role == "assistant");
  } else {
    check(r.prompt.empty() != r.prompt_tokens.empty());  // text or token ids, not both
    for (int32_t t : r.prompt_tokens) check(t >= 0);
  }
  check(int64_t(r.logit_bias.size()) <= lim.max_logit_bias);
  for (const auto& [id, b] : r.logit_bias) check(id >= 0 && b >= -100.0f && b <= 100.0f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  one(body, ts::server::Endpoint::kChat);
  one(body, ts::server::Endpoint::kCompletions);
  return 0;
}
