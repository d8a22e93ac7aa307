#include "server/openai_response.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

namespace ts::server {
namespace {

using json = nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* object_name(Endpoint ep, bool chunk) {
  if (ep == Endpoint::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }

json usage_json(const UsageInfo& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_prompt_tokens}};
  return j;
}

json served_json(const ServedInfo& s) {
  json j = {{"tier_requested", s.tier_requested},
            {"tier_served", s.tier_served},
            {"degraded_reason", nullptr},
            {"queue_ms", round3(s.queue_ms)},
            {"ttft_ms", round3(s.ttft_ms)},
            {"preemptions", s.preemptions}};
  if (!s.degraded_reason.empty()) j["degraded_reason"] = s.degraded_reason;
  if (s.steps_behind >= 0) {
    j["steps_behind"] = s.steps_behind;
    j["steps_behind_after_max_wait"] = s.steps_behind_after_max_wait;
  }
  return j;
}

json head_json(const ResponseHead& h, bool chunk) {
  return {{"id", h.id}, {"object", object_name(h.endpoint, chunk)}, {"created", h.created}, {"model", h.model}};
}

json bytes_json(const std::string& piece) {
  json b = json::array();
  for (unsigned char c : piece) b.push_back(int(c));
  return b;
}

json logprobs_json(Endpoint ep, const LogprobsInfo& lp) {
  if (ep == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprobInfo& t : lp.tokens) {
      json top = json::array();
      for (const auto& [piece, v] : t.top)
        top.push_back({{"token", piece}, {"logprob", v}, {"bytes", bytes_json(piece)}});
      content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes_json(t.token)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), values = json::array(), tops = json::array(), offsets = json::array();
  int64_t offset = lp.text_offset;
  for (const TokenLogprobInfo& t : lp.tokens) {
    tokens.push_back(t.token);
    values.push_back(t.logprob);
    json top = json::object();
    for (const auto& [piece, v] : t.top)
      if (!top.contains(piece)) top[piece] = v;  // pieces are keys: the most likely of equal texts
    tops.push_back(top);
    offsets.push_back(offset);
    offset += int64_t(t.token.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

}  // namespace

std::string completion_body(const ResponseHead& h, const std::string& text, const std::string& finish_reason,
                            const UsageInfo& u, const ServedInfo& s, const LogprobsInfo* logprobs) {
  json j = head_json(h, false);
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (logprobs) choice["logprobs"] = logprobs_json(h.endpoint, *logprobs);
  if (h.endpoint == Endpoint::kChat)
    choice["message"] = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
  else
    choice["text"] = text;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(u);
  j["service_tier"] = s.service_tier.empty() ? s.tier_served : s.service_tier;
  j["system_fingerprint"] = nullptr;
  j["tierserve"] = served_json(s);
  return dump(j);
}

std::string chunk_json(const ResponseHead& h, const std::string& text, bool first, const std::string& finish_reason,
                       const std::string& service_tier, const LogprobsInfo* logprobs, bool usage_null) {
  json j = head_json(h, true);
  json choice = {{"index", 0}, {"finish_reason", nullptr}, {"logprobs", nullptr}};
  if (logprobs && !logprobs->tokens.empty()) choice["logprobs"] = logprobs_json(h.endpoint, *logprobs);
  if (!finish_reason.empty()) choice["finish_reason"] = finish_reason;
  if (h.endpoint == Endpoint::kChat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({choice});
  j["service_tier"] = service_tier;
  j["system_fingerprint"] = nullptr;
  if (usage_null) j["usage"] = nullptr;
  return dump(j);
}

std::string usage_chunk_json(const ResponseHead& h, const UsageInfo& u, const ServedInfo& s) {
  json j = head_json(h, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  j["service_tier"] = s.service_tier.empty() ? s.tier_served : s.service_tier;
  j["system_fingerprint"] = nullptr;
  j["tierserve"] = served_json(s);
  return dump(j);
}

std::string sse_data(std::string_view payload) {
  std::string s;
  s.reserve(payload.size() + 8);
  s += "data: ";
  s += payload;
  s += "\n\n";
  return s;
}

std::string sse_comment(std::string_view text) {
  std::string s = ": ";
  for (char c : text) s.push_back(c == '\n' || c == '\r' ? ' ' : c);
  s += "\n\n";
  return s;
}

std::string make_response_id(Endpoint ep) {
  // One seeded generator per thread; ids only need to be unique, not secret.
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-";
  uint64_t a = rng(), b = rng();
  for (int i = 0; i < 16; ++i, a >>= 4) id.push_back(kHex[a & 15]);
  for (int i = 0; i < 8; ++i, b >>= 4) id.push_back(kHex[b & 15]);
  return id;
}

}  // namespace ts::server
