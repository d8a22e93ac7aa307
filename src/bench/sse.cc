#include "sse.h"

namespace ts::bench {

void SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n') {
      std::string_view l = partial_;
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      line(l);
      partial_.clear();
    } else {
      partial_ += c;
    }
  }
}

void SseParser::finish() {
  if (!partial_.empty()) {
    std::string l = std::move(partial_);
    partial_.clear();
    if (!l.empty() && l.back() == '\r') l.pop_back();
    line(l);
  }
  line("");
}

void SseParser::line(std::string_view l) {
  if (l.empty()) {  // blank line: the event is complete
    if (has_data_) on_data_(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.front() == ':') {
    l.remove_prefix(1);
    if (!l.empty() && l.front() == ' ') l.remove_prefix(1);
    on_comment_(l);
    return;
  }
  const size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_.append(value);
    has_data_ = true;
  }
  // event:, id:, retry: carry nothing the benchmark needs.
}

}  // namespace ts::bench
