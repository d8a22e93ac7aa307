#include "request_state.h"

#include <utility>

#include "engine/stop.h"

namespace ts::serving {

RequestState::RequestState(RequestId id_, GenerateRequest r, Callback c, const tok::Tokenizer& tok, int64_t arrival)
    : id(id_), req(std::move(r)), cb(std::move(c)), arrival_ns(arrival), tok_(tok), decoder_(tok) {
  tier_label = req.tier;
  tier_served = req.tier;
  known = req.prompt;
}

std::string RequestState::take(size_t end) {
  if (end <= streamed_.size()) return {};
  std::string out = text_.substr(streamed_.size(), end - streamed_.size());
  streamed_ += out;
  return out;
}

std::string RequestState::finish_text() {
  const size_t before = text_.size();
  text_ += decoder_.flush();
  // The flush can only add U+FFFD, but a stop string may still end in it.
  const engine::StopCheck sc = engine::check_stop(text_, req.stop, before);
  return take(sc.stopped ? sc.end : text_.size());
}

std::string RequestState::push_token(int32_t token, EndKind* end) {
  *end = EndKind::kNone;
  known.push_back(token);
  ++n_generated;
  if (!req.ignore_eos && tok_.is_eog(token)) {
    // The end-of-generation token is not text; what was held back for a stop string
    // that can no longer complete goes out now.
    *end = EndKind::kStop;
    return finish_text();
  }
  const size_t before = text_.size();
  text_ += decoder_.push(token);
  const engine::StopCheck sc = engine::check_stop(text_, req.stop, before);
  if (sc.stopped) {
    *end = EndKind::kStop;
    return take(sc.end);
  }
  if (n_generated >= max_tokens) {
    *end = EndKind::kLength;
    return finish_text();
  }
  return take(sc.end);
}

}  // namespace ts::serving
