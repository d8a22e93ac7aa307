#include "tokenizer/text_output.h"

#include <algorithm>
#include <utility>

namespace ts::tok {

StopCheck check_stop(std::string_view text, std::span<const std::string> stops, size_t new_from) {
  size_t best = std::string_view::npos;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    // An occurrence ending at or after new_from starts at or after new_from - (|s| - 1).
    const size_t from = new_from >= s.size() - 1 ? new_from - (s.size() - 1) : 0;
    const size_t pos = text.find(s, from);
    if (pos != std::string_view::npos) best = std::min(best, pos);
  }
  if (best != std::string_view::npos) return {true, best};
  // Hold back the longest suffix of text that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), text.size()); len > hold; --len) {
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  return {false, text.size() - hold};
}

TextOutput::TextOutput(const Tokenizer& tok, std::vector<std::string> stops, bool ignore_eos, int64_t max_tokens)
    : tok_(tok), decoder_(tok), stops_(std::move(stops)), ignore_eos_(ignore_eos), max_tokens_(max_tokens) {}

std::string TextOutput::take(size_t end) {
  if (end <= shown_.size()) return {};
  std::string out = text_.substr(shown_.size(), end - shown_.size());
  shown_ += out;
  return out;
}

std::string TextOutput::flush_and_take() {
  over_ = true;
  const size_t before = text_.size();
  text_ += decoder_.flush();
  // The flush can only add U+FFFD, but a stop string may still end in it.
  const StopCheck sc = check_stop(text_, stops_, before);
  return take(sc.stopped ? sc.end : text_.size());
}

std::string TextOutput::finish() { return over_ ? std::string() : flush_and_take(); }

std::string TextOutput::push(TokenId token, TextEnd* end) {
  *end = TextEnd::kNone;
  if (over_) return {};
  if (!ignore_eos_ && tok_.is_eog(token)) {
    // The end-of-generation token is not text; what was held back for a stop string
    // that can no longer complete goes out now.
    *end = TextEnd::kEog;
    return flush_and_take();
  }
  ++n_tokens_;
  const size_t before = text_.size();
  text_ += decoder_.push(token);
  const StopCheck sc = check_stop(text_, stops_, before);
  if (sc.stopped) {
    *end = TextEnd::kStopString;
    over_ = true;
    return take(sc.end);
  }
  if (max_tokens_ > 0 && n_tokens_ >= max_tokens_) {
    *end = TextEnd::kLength;
    return flush_and_take();
  }
  return take(sc.end);
}

}  // namespace ts::tok
