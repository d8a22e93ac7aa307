#include "response.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

namespace ts::bench {

using nlohmann::json;

bool is_refusal_code(std::string_view code) {
  for (std::string_view c : {"queue_full", "queue_timeout", "predicted_wait", "overloaded", "shed_for_higher_tier",
                             "draining", "shutdown", "rate_limit_exceeded"})
    if (code == c) return true;
  return false;
}

ResponseReader::ResponseReader(RequestRecord* rec)
    : rec_(rec),
      sse_([this](std::string_view d) { on_event(d); }, [this](std::string_view c) { on_comment(c); }) {}

void ResponseReader::on_comment(std::string_view c) {
  // tierserve announces changes in-band: "tierserve tier_changed from=A to=B reason=R"
  // and "tierserve preempted tier=T reason=R" (docs/server.md).
  if (c.rfind("tierserve ", 0) != 0) return;
  std::vector<std::string_view> words;
  for (std::string_view rest = c.substr(10); !rest.empty();) {
    const size_t sp = rest.find(' ');
    if (sp) words.push_back(rest.substr(0, sp));
    if (sp == std::string_view::npos) break;
    rest.remove_prefix(sp + 1);
  }
  if (words.empty()) return;
  const std::string_view event = words[0];
  std::string to, reason;
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = words[i].substr(0, eq), value = words[i].substr(eq + 1);
    if (key == "to") to = std::string(value);
    if (key == "reason") reason = std::string(value);
  }
  if (event == "tier_changed") {
    ++rec_->n_tier_changes;
    if (!to.empty()) rec_->tier_served = to;
    if (!reason.empty()) rec_->degraded_reason = reason;
  } else if (event == "preempted") {
    rec_->preemptions = std::max(rec_->preemptions, 0) + 1;
  }
}

void ResponseReader::on_status(int status) { rec_->http_status = status; }

void ResponseReader::on_header(std::string_view name, std::string_view value) {
  if (name == "content-type") {
    event_stream_ = value.find("text/event-stream") != std::string_view::npos;
  } else if (name == "retry-after") {
    // Seconds form only; an HTTP date is reported as unknown.
    const std::string v(value);
    char* end = nullptr;
    const double s = std::strtod(v.c_str(), &end);
    if (end != v.c_str()) rec_->retry_after_s = s;
  } else if (name == "x-tierserve-tier-served") {
    rec_->tier_served = std::string(value);
  } else if (name == "x-tierserve-degraded-reason") {
    rec_->degraded_reason = std::string(value);
  } else if (name == "x-tierserve-tier-requested") {
    rec_->tier_resolved = std::string(value);
  }
}

void ResponseReader::on_body(std::string_view bytes, int64_t now_ns) {
  now_ns_ = now_ns;
  if (event_stream_ && rec_->http_status == 200) sse_.feed(bytes);
  else if (body_.size() < (1u << 20)) body_.append(bytes);
}

void ResponseReader::read_object(const void* p) {
  const json& j = *static_cast<const json*>(p);
  if (!j.is_object()) return;
  // The body's service_tier is OpenAI's value (priority, default, flex); a server's own tier
  // name, when it says one (x-tierserve-tier-served, the tierserve object), wins.
  if (auto it = j.find("service_tier"); it != j.end() && it->is_string() && rec_->tier_served.empty())
    rec_->tier_served = it->get<std::string>();
  if (auto it = j.find("usage"); it != j.end() && it->is_object()) {
    if (auto c = it->find("completion_tokens"); c != it->end() && c->is_number_integer()) {
      rec_->n_output_tokens = c->get<int>();
      usage_tokens_ = true;
    }
    if (auto c = it->find("prompt_tokens"); c != it->end() && c->is_number_integer()) rec_->n_prompt_tokens = c->get<int>();
  }
  if (auto it = j.find("tierserve"); it != j.end() && it->is_object()) {
    const json& t = *it;
    if (auto f = t.find("tier_served"); f != t.end() && f->is_string()) rec_->tier_served = f->get<std::string>();
    if (auto f = t.find("tier_requested"); f != t.end() && f->is_string()) rec_->tier_resolved = f->get<std::string>();
    if (auto f = t.find("degraded_reason"); f != t.end() && f->is_string()) rec_->degraded_reason = f->get<std::string>();
    if (auto f = t.find("queue_ms"); f != t.end() && f->is_number()) rec_->server_queue_ms = f->get<double>();
    if (auto f = t.find("ttft_ms"); f != t.end() && f->is_number()) rec_->server_ttft_ms = f->get<double>();
    if (auto f = t.find("preemptions"); f != t.end() && f->is_number_integer()) rec_->preemptions = f->get<int>();
    if (auto f = t.find("steps_behind"); f != t.end() && f->is_number_integer()) rec_->steps_behind = f->get<int>();
    if (auto f = t.find("steps_behind_after_max_wait"); f != t.end() && f->is_number_integer())
      rec_->steps_behind_after_max_wait = f->get<int>();
  }
  if (auto it = j.find("error"); it != j.end() && !it->is_null()) {
    stream_error_ = it->is_object() && it->contains("message") && (*it)["message"].is_string()
                        ? (*it)["message"].get<std::string>()
                        : it->dump();
    if (it->is_object() && it->contains("code") && (*it)["code"].is_string())
      rec_->error_code = (*it)["code"].get<std::string>();
  }
}

void ResponseReader::on_event(std::string_view data) {
  if (data == "[DONE]") {
    saw_done_ = true;
    return;
  }
  const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;  // not ours to judge; counted by the missing tokens
  read_object(&j);
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) return;
  const json& c = (*choices)[0];
  if (!c.is_object()) return;
  bool token = false;
  if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
    for (const char* key : {"content", "reasoning_content"})
      if (auto t = d->find(key); t != d->end() && t->is_string() && !t->get_ref<const std::string&>().empty()) token = true;
  } else if (auto t = c.find("text"); t != c.end() && t->is_string() && !t->get_ref<const std::string&>().empty()) {
    token = true;
  }
  if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) saw_finish_ = true;
  if (token) {
    ++n_chunks_;
    if (!rec_->first_token_ns) rec_->first_token_ns = now_ns_;
    rec_->token_ns.push_back(now_ns_);
  }
}

void ResponseReader::on_end(int64_t now_ns) {
  rec_->end_ns = now_ns;
  const int s = rec_->http_status;
  if (s != 200) {
    // The status itself is the type: 429 (a key's or tier's limit), 503 (shedding),
    // 400 (a request the server refuses) each mean something different.
    rec_->error = "http_" + std::to_string(s);
    rec_->error_detail = body_.substr(0, 300);
    const json j = json::parse(body_, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("error") && j["error"].is_object()) {
      const json& e = j["error"];
      for (const char* k : {"code", "type"})
        if (e.contains(k) && e[k].is_string()) {
          rec_->error_code = e[k].get<std::string>();
          break;
        }
    }
    return;
  }
  if (event_stream_) {
    sse_.finish();
    if (!usage_tokens_) rec_->n_output_tokens = n_chunks_;
    if (!stream_error_.empty()) {
      // A stream whose headers went out at admission and that was then turned away before
      // any token (queue timeout, shedding) is a refusal said in-band, not a broken stream.
      rec_->error = n_chunks_ == 0 && is_refusal_code(rec_->error_code) ? "stream_refused" : "stream_error";
      rec_->error_detail = stream_error_.substr(0, 300);
    } else if (!saw_done_ && !saw_finish_) {
      rec_->error = "incomplete";
      rec_->error_detail = "stream ended without [DONE] or a finish_reason";
    }
    return;
  }
  // A whole JSON body: TTFT is the end-to-end time.
  const json j = json::parse(body_, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    rec_->error = "protocol";
    rec_->error_detail = "response is not JSON: " + body_.substr(0, 200);
    return;
  }
  read_object(&j);
  if (!stream_error_.empty()) {
    rec_->error = "stream_error";
    rec_->error_detail = stream_error_.substr(0, 300);
    return;
  }
  if (!usage_tokens_) {
    // Without usage, count whitespace-separated words of the text as a rough stand-in.
    int words = 0;
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const json& c = j["choices"][0];
      std::string text;
      if (c.contains("message") && c["message"].is_object() && c["message"].contains("content") &&
          c["message"]["content"].is_string())
        text = c["message"]["content"].get<std::string>();
      else if (c.contains("text") && c["text"].is_string())
        text = c["text"].get<std::string>();
      bool in = false;
      for (char ch : text) {
        const bool sp = ch == ' ' || ch == '\n' || ch == '\t';
        if (!sp && !in) ++words;
        in = !sp;
      }
    }
    rec_->n_output_tokens = words;
  }
  rec_->first_token_ns = now_ns;
}

}  // namespace ts::bench
