// One access-log line per finished request (docs/server.md, logs): what the server decided
// and measured, never the key itself (its name) nor the prompt. A Responder wrapper writes
// the line when the response ends (respond(), or end() of a stream); handlers add what only
// they know (model, tiers, tokens, timings) to the request's AccessRecord before they end it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/clock.h"
#include "server/auth.h"
#include "server/http_types.h"

namespace ts::server {

struct AccessRecord {
  std::string request_id, trace_id, key_name, route, client;
  std::string model, model_version, tier_requested, tier_served, degraded_reason, error_code;
  int status = 0;
  int64_t prompt_tokens = -1, completion_tokens = -1, cached_tokens = -1;
  double queue_ms = -1, ttft_ms = -1;
  int32_t preemptions = -1;
};

// The request id to use: `incoming` when it is 1 to 128 printable ASCII characters (no
// spaces), else a fresh random one (32 hex digits).
std::string request_id_for(std::string_view incoming);
// The trace id (32 hex digits) of a valid W3C traceparent ("00-<trace>-<parent>-<flags>",
// lowercase hex, neither id all zeros), else "".
std::string trace_id_of(std::string_view traceparent);
// error.code of an OpenAI error body (or an SSE "data: {error...}" event), else "".
std::string error_code_of(std::string_view body);

class AccessLogResponder final : public Responder {
 public:
  // `log`: whether to write the line (routes that are not logged still get the wrapper's
  // request id handling).
  AccessLogResponder(std::shared_ptr<Responder> inner, std::shared_ptr<AccessRecord> rec, const Clock& clock, bool log);
  void respond(HttpResponse r) override;
  void start_stream(HttpResponse head) override;
  void send(std::string data) override;
  void end() override;
  void on_disconnect(std::function<void()> fn) override;
  AccessRecord* access_record() override { return rec_.get(); }

 private:
  void write_line();
  std::shared_ptr<Responder> inner_;
  std::shared_ptr<AccessRecord> rec_;
  const Clock& clock_;
  int64_t start_ns_;
  bool log_;
  std::atomic<bool> written_{false};
  std::mutex mu_;  // status and error code are set from the thread that ends the response
};

// The start of every request's handling, in `serve` and in `gateway`: its request and
// trace ids, the access-log wrapper (health probes and /metrics are not logged), and the
// API key when keys are configured. A missing or unknown key is answered 401 here (then
// `out` is null); health routes need none.
struct OpenedExchange {
  std::shared_ptr<Responder> out;
  KeyState* key = nullptr;
  AccessRecord* rec = nullptr;
};
OpenedExchange open_exchange(const HttpRequest& req, std::shared_ptr<Responder> raw, const KeyTable& keys, const Clock& clock,
                             bool log_access);

}  // namespace ts::server
