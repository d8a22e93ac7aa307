// nlohmann::json throws on malformed input (including invalid UTF-8 in strings and lone
// surrogate escapes); the parse is wrapped and turned into a 400. Values are then read
// with explicit type checks, never with get<T>() on an unchecked value.
#include "server/openai_request.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace ts::server {
namespace {

using json = nlohmann::json;

std::optional<ApiError> type_error(const std::string& field, const char* want) {
  return bad_request("'" + field + "' must be " + want, field, "invalid_type");
}

// Integers as JSON integers, or as floats with an integral value (some clients send 16.0).
std::optional<ApiError> read_int(const json& v, const std::string& field, int64_t lo, int64_t hi, int64_t& out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > uint64_t(hi)) return bad_request("'" + field + "' is too large (at most " + std::to_string(hi) + ")", field, "invalid_value");
      out = int64_t(u);
    } else {
      out = v.get<int64_t>();
    }
  } else if (v.is_number_float()) {
    // A float stands for an integer only where doubles are exact (|d| <= 2^53): beyond
    // that, the value written and the value parsed may differ (-9223372036854775809 parses
    // as -2^63, in range), and 2^63 would not even convert.
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return type_error(field, "an integer");
    constexpr double kExact = 9007199254740992.0;  // 2^53
    if (std::fabs(d) > kExact)
      return bad_request("'" + field + "' is out of range (an integer written as a float must be within +-2^53)", field,
                         "invalid_value");
    if (d < double(lo) || d > double(hi))
      return bad_request("'" + field + "' is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", field,
                         "invalid_value");
    out = int64_t(d);
  } else {
    return type_error(field, "an integer");
  }
  if (out < lo || out > hi)
    return bad_request("'" + field + "' is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                           std::to_string(out),
                       field, "invalid_value");
  return std::nullopt;
}

std::optional<ApiError> read_num(const json& v, const std::string& field, double lo, double hi, double& out) {
  if (!v.is_number()) return type_error(field, "a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "'%s' must be between %g and %g", field.c_str(), lo, hi);
    return bad_request(buf, field, "invalid_value");
  }
  out = d;
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& v, const std::string& field, bool& out) {
  if (!v.is_boolean()) return type_error(field, "a boolean");
  out = v.get<bool>();
  return std::nullopt;
}

std::optional<ApiError> read_string(const json& v, const std::string& field, std::string& out) {
  if (!v.is_string()) return type_error(field, "a string");
  out = v.get<std::string>();
  return std::nullopt;
}

// "content": a string, or an array of parts of which only {"type":"text","text":...} is supported.
// null content: assistant messages only (OpenAI's rule: an assistant turn may carry only
// tool calls or a refusal).
std::optional<ApiError> read_content(const json& v, const std::string& field, bool null_ok, std::string& out) {
  if (v.is_string()) {
    out = v.get<std::string>();
    return std::nullopt;
  }
  if (v.is_null()) {
    if (!null_ok) return bad_request("'" + field + "' must not be null (only an assistant message may have null content)", field, "invalid_type");
    out.clear();
    return std::nullopt;
  }
  if (!v.is_array()) return type_error(field, "a string or an array of text parts");
  out.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const json& p = v[i];
    const std::string pf = field + "[" + std::to_string(i) + "]";
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
      return bad_request("'" + pf + "' must be an object with a 'type'", pf, "invalid_type");
    if (p["type"].get<std::string>() != "text")
      return bad_request("'" + pf + "': only text content parts are supported, got type '" +
                             p["type"].get<std::string>() + "'",
                         pf, "unsupported_content");
    if (!p.contains("text") || !p["text"].is_string()) return type_error(pf + ".text", "a string");
    out += p["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> read_messages(const json& v, const RequestLimits& lim, std::vector<tok::ChatMessage>& out) {
  if (!v.is_array()) return type_error("messages", "an array of messages");
  if (v.empty()) return bad_request("'messages' must contain at least one message", "messages", "invalid_value");
  if (int64_t(v.size()) > lim.max_messages)
    return bad_request("too many messages: " + std::to_string(v.size()) + " (at most " + std::to_string(lim.max_messages) + ")",
                       "messages", "invalid_value");
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string f = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return type_error(f, "an object");
    if (!m.contains("role") || !m["role"].is_string()) return type_error(f + ".role", "a string");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant")
      return bad_request("'" + f + ".role': unknown role '" + m["role"].get<std::string>() +
                             "' (supported: system, developer, user, assistant)",
                         f + ".role", "invalid_value");
    if (m.contains("tool_calls") && !m["tool_calls"].is_null())
      return bad_request("'" + f + ".tool_calls': tool calls are not supported", f + ".tool_calls", "unsupported_parameter");
    tok::ChatMessage cm;
    cm.role = role;
    if (!m.contains("content")) return bad_request("'" + f + ".content' is required", f + ".content", "missing_field");
    if (auto e = read_content(m["content"], f + ".content", role == "assistant", cm.content)) return e;
    out.push_back(std::move(cm));
  }
  return std::nullopt;
}

std::optional<ApiError> unsupported(const std::string& field, const std::string& why) {
  return bad_request("'" + field + "' " + why, field, "unsupported_parameter");
}

std::optional<ApiError> parse_object(const json& j, Endpoint ep, const RequestLimits& lim, CompletionRequest& r) {
  if (!j.is_object()) return bad_request("the request body must be a JSON object", "", "invalid_json");
  r.endpoint = ep;
  auto has = [&](const char* k) { return j.contains(k) && !j[k].is_null(); };

  if (has("model"))
    if (auto e = read_string(j["model"], "model", r.model)) return e;

  if (ep == Endpoint::kChat) {
    if (!j.contains("messages")) return bad_request("'messages' is required", "messages", "missing_field");
    if (auto e = read_messages(j["messages"], lim, r.messages)) return e;
  } else {
    if (!j.contains("prompt")) return bad_request("'prompt' is required", "prompt", "missing_field");
    const json& p = j["prompt"];
    if (p.is_string()) {
      r.prompt = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt = p[0].get<std::string>();
    } else if (p.is_array() && (p.empty() || p[0].is_number() || (p.size() == 1 && p[0].is_array()))) {
      // Token ids: [1, 2, 3], or one such array in an array.
      const bool nested = !p.empty() && p[0].is_array();
      const json& ids = nested ? p[0] : p;
      r.prompt_tokens.reserve(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        const json& v = ids[i];
        if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t(std::numeric_limits<int32_t>::max())) {
          r.prompt_tokens.push_back(int32_t(v.get<uint64_t>()));  // the common case, without a field name
          continue;
        }
        int64_t id = 0;
        const std::string field = nested ? "prompt[0][" + std::to_string(i) + "]" : "prompt[" + std::to_string(i) + "]";
        if (auto e = read_int(v, field, 0, std::numeric_limits<int32_t>::max(), id)) return e;
        r.prompt_tokens.push_back(int32_t(id));
      }
      if (r.prompt_tokens.empty()) return bad_request("'prompt' is empty", "prompt", "invalid_value");
    } else if (p.is_array()) {
      return bad_request("'prompt' as an array is supported with exactly one string or one list of token ids (one "
                         "completion per request)",
                         "prompt", "unsupported_parameter");
    } else {
      return type_error("prompt", "a string or token ids");
    }
    if (r.prompt.empty() && r.prompt_tokens.empty()) return bad_request("'prompt' is empty", "prompt", "invalid_value");
  }

  // max_completion_tokens is the newer name; when both are given they must agree.
  const int64_t cap = std::max<int64_t>(1, lim.max_tokens_cap);
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (!has(k)) continue;
    int64_t v = 0;
    if (auto e = read_int(j[k], k, 1, cap, v)) return e;
    if (r.max_tokens && *r.max_tokens != v)
      return bad_request("'max_tokens' and 'max_completion_tokens' differ", k, "invalid_value");
    r.max_tokens = v;
  }

  if (has("temperature"))
    if (auto e = read_num(j["temperature"], "temperature", 0.0, 2.0, r.temperature)) return e;
  if (has("top_p"))
    if (auto e = read_num(j["top_p"], "top_p", 0.0, 1.0, r.top_p)) return e;
  if (has("top_k")) {
    int64_t v = 0;
    if (auto e = read_int(j["top_k"], "top_k", -1, std::numeric_limits<int32_t>::max(), v)) return e;
    r.top_k = int32_t(std::max<int64_t>(v, 0));  // -1 (vLLM's "off") and 0 both mean off
  }
  if (has("min_p"))
    if (auto e = read_num(j["min_p"], "min_p", 0.0, 1.0, r.min_p)) return e;
  if (has("frequency_penalty"))
    if (auto e = read_num(j["frequency_penalty"], "frequency_penalty", -2.0, 2.0, r.frequency_penalty)) return e;
  if (has("presence_penalty"))
    if (auto e = read_num(j["presence_penalty"], "presence_penalty", -2.0, 2.0, r.presence_penalty)) return e;
  for (const char* k : {"repetition_penalty", "repeat_penalty"})
    if (has(k))
      if (auto e = read_num(j[k], k, 0.01, 10.0, r.repetition_penalty)) return e;
  if (has("seed")) {
    int64_t v = 0;
    if (auto e = read_int(j["seed"], "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), v))
      return e;
    r.seed = v;
  }

  if (has("stop")) {
    const json& s = j["stop"];
    std::vector<std::string> v;
    if (s.is_string()) {
      v.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (int64_t(s.size()) > lim.max_stop_strings)
        return bad_request("'stop' has " + std::to_string(s.size()) + " strings (at most " +
                               std::to_string(lim.max_stop_strings) + ")",
                           "stop", "invalid_value");
      for (size_t i = 0; i < s.size(); ++i) {
        if (!s[i].is_string()) return type_error("stop[" + std::to_string(i) + "]", "a string");
        v.push_back(s[i].get<std::string>());
      }
    } else {
      return type_error("stop", "a string or an array of strings");
    }
    for (auto& x : v)
      if (!x.empty()) r.stop.push_back(std::move(x));
  }

  if (has("n")) {
    int64_t n = 0;
    if (auto e = read_int(j["n"], "n", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), n)) return e;
    if (n != 1) return bad_request("'n' must be 1 (one choice per request), got " + std::to_string(n), "n", "unsupported_parameter");
  }
  if (has("best_of")) {
    int64_t n = 0;
    if (auto e = read_int(j["best_of"], "best_of", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), n))
      return e;
    if (n != 1) return unsupported("best_of", "must be 1");
  }
  if (has("stream"))
    if (auto e = read_bool(j["stream"], "stream", r.stream)) return e;
  if (has("stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) return type_error("stream_options", "an object");
    if (!r.stream) return bad_request("'stream_options' is only allowed with stream: true", "stream_options", "invalid_value");
    if (so.contains("include_usage") && !so["include_usage"].is_null())
      if (auto e = read_bool(so["include_usage"], "stream_options.include_usage", r.include_usage)) return e;
  }
  if (has("ignore_eos"))
    if (auto e = read_bool(j["ignore_eos"], "ignore_eos", r.ignore_eos)) return e;
  if (has("user"))
    if (auto e = read_string(j["user"], "user", r.user)) return e;
  if (has("service_tier")) {
    std::string t;
    if (auto e = read_string(j["service_tier"], "service_tier", t)) return e;
    r.service_tier = t;
  }
  if (has("priority")) {
    int64_t p = 0;
    if (auto e = read_int(j["priority"], "priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), p))
      return e;
    r.priority = p;
  }

  for (const char* k : {"tools", "functions", "tool_choice", "function_call"})
    if (has(k) && !(j[k].is_array() && j[k].empty()) && !(j[k].is_string() && j[k].get<std::string>() == "none"))
      return unsupported(k, "is not supported (no tool calling)");
  if (ep == Endpoint::kChat) {
    bool want = false;
    if (has("logprobs"))
      if (auto e = read_bool(j["logprobs"], "logprobs", want)) return e;
    int64_t top = 0;
    if (has("top_logprobs")) {
      if (auto e = read_int(j["top_logprobs"], "top_logprobs", 0, 20, top)) return e;
      if (!want) return bad_request("'top_logprobs' needs logprobs: true", "top_logprobs", "invalid_value");
    }
    r.logprobs = want ? int32_t(top) : -1;
  } else {
    if (has("top_logprobs"))
      return bad_request("'top_logprobs' is a chat field; completions take logprobs: N", "top_logprobs",
                         "invalid_value");
    if (has("logprobs")) {
      int64_t n = 0;
      if (auto e = read_int(j["logprobs"], "logprobs", 0, 5, n)) return e;
      r.logprobs = int32_t(n);
    }
  }
  if (has("echo") && !(j["echo"].is_boolean() && !j["echo"].get<bool>())) return unsupported("echo", "is not supported");
  if (has("suffix")) return unsupported("suffix", "is not supported");
  if (has("logit_bias")) {
    const json& lb = j["logit_bias"];
    if (!lb.is_object()) return type_error("logit_bias", "an object of token ids to numbers");
    if (int64_t(lb.size()) > lim.max_logit_bias)
      return bad_request("'logit_bias' has " + std::to_string(lb.size()) + " entries (at most " +
                             std::to_string(lim.max_logit_bias) + ")",
                         "logit_bias", "invalid_value");
    for (const auto& [key, v] : lb.items()) {
      // Keys are token ids written in decimal: "50256".
      int64_t id = 0;
      bool ok = !key.empty() && key.size() <= 10;
      for (char c : key) {
        ok = ok && c >= '0' && c <= '9';
        if (ok) id = id * 10 + (c - '0');
      }
      if (!ok || id > std::numeric_limits<int32_t>::max())
        return bad_request("'logit_bias' key '" + key.substr(0, 32) + "' is not a token id (a decimal integer >= 0)",
                           "logit_bias", "invalid_value");
      double b = 0.0;
      if (auto e = read_num(v, "logit_bias." + key, -100.0, 100.0, b)) return e;
      r.logit_bias.emplace_back(int32_t(id), float(b));
    }
  }
  if (has("response_format")) {
    const json& f = j["response_format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string() || f["type"].get<std::string>() != "text")
      return unsupported("response_format", "other than {\"type\": \"text\"} is not supported");
  }
  return std::nullopt;
}

}  // namespace

int32_t json_depth(std::string_view s, int32_t limit) {
  int32_t depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > limit) return max_depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

std::optional<ApiError> parse_completion_request(std::string_view body, Endpoint ep, const RequestLimits& limits,
                                                 CompletionRequest& out) {
  out = CompletionRequest{};
  out.temperature = limits.defaults.temperature;
  out.top_p = limits.defaults.top_p;
  out.top_k = limits.defaults.top_k;
  out.min_p = limits.defaults.min_p;
  out.repetition_penalty = limits.defaults.repetition_penalty;
  if (body.empty()) return bad_request("the request body is empty (expected a JSON object)", "", "invalid_json");
  // A NUL byte is never valid JSON text, and the JSON reader would take it for the end of
  // the input (accepting whatever follows it).
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos)
    return bad_request("malformed JSON: a NUL byte at offset " + std::to_string(nul), "", "invalid_json");
  if (json_depth(body, limits.max_json_depth) > limits.max_json_depth)
    return bad_request("the JSON body is nested deeper than " + std::to_string(limits.max_json_depth) + " levels", "",
                       "invalid_json");
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::parse_error& e) {
    // e.what() names the byte offset and what was expected; invalid UTF-8 lands here too.
    return bad_request(std::string("malformed JSON: ") + e.what(), "", "invalid_json");
  } catch (const std::exception& e) {
    return bad_request(std::string("malformed JSON: ") + e.what(), "", "invalid_json");
  }
  try {
    return parse_object(j, ep, limits, out);
  } catch (const std::exception& e) {
    // Every access above is type-checked first; this is a backstop, not a path.
    return bad_request(std::string("invalid request: ") + e.what(), "", "invalid_request");
  }
}

}  // namespace ts::server
