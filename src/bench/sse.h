// Incremental parser of a text/event-stream body: bytes in (split anywhere), events out.
// Private to the bench layer.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace ts::bench {

class SseParser {
 public:
  // `on_data` gets each event's data (multi-line data joined with '\n'); `on_comment`
  // each ": ..." line (tierserve announces in-band tier changes that way).
  SseParser(std::function<void(std::string_view)> on_data,
            std::function<void(std::string_view)> on_comment)
      : on_data_(std::move(on_data)), on_comment_(std::move(on_comment)) {}

  void feed(std::string_view bytes);
  // End of stream: dispatches an event that lacked its terminating blank line.
  void finish();

 private:
  void line(std::string_view l);
  std::function<void(std::string_view)> on_data_, on_comment_;
  std::string partial_;  // an unterminated line
  std::string data_;     // the current event's data
  bool has_data_ = false;
};

}  // namespace ts::bench
