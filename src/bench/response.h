// Interprets an OpenAI-compatible response (streamed or not) into a RequestRecord:
// token arrival times, usage, the tier served and tierserve's extension fields. Pure
// apart from the clock, so it is tested without sockets. Private to the bench layer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "bench/record.h"
#include "sse.h"

namespace ts::bench {

// An error code with which a server turns a request away (retrying later may succeed):
// queue_full, queue_timeout, predicted_wait, overloaded, shed_for_higher_tier, draining...
bool is_refusal_code(std::string_view code);

class ResponseReader {
 public:
  explicit ResponseReader(RequestRecord* rec);

  // Status line and the headers the benchmark reads (lower-case names).
  void on_status(int status);
  void on_header(std::string_view name_lower, std::string_view value);
  // Body bytes as they arrive at time now_ns.
  void on_body(std::string_view bytes, int64_t now_ns);
  // The body ended (cleanly) at now_ns: sets the error type when the response was not
  // a complete success. Call once.
  void on_end(int64_t now_ns);

 private:
  void on_event(std::string_view data);
  void on_comment(std::string_view comment);
  void read_object(const void* json);  // nlohmann::json*, kept out of this header
  RequestRecord* rec_;
  SseParser sse_;
  bool event_stream_ = false;
  bool saw_done_ = false, saw_finish_ = false;
  int n_chunks_ = 0;
  bool usage_tokens_ = false;
  std::string body_;  // non-stream or error bodies
  std::string stream_error_;
  int64_t now_ns_ = 0;
};

}  // namespace ts::bench
