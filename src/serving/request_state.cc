#include "request_state.h"

#include <utility>

namespace ts::serving {

RequestState::RequestState(RequestId id_, GenerateRequest r, Callback c, const tok::Tokenizer& tok, int64_t arrival,
                           int64_t max_tokens_)
    : id(id_),
      req(std::move(r)),
      cb(std::move(c)),
      max_tokens(max_tokens_),
      arrival_ns(arrival),
      text_(tok, req.stop, req.ignore_eos, max_tokens_) {
  tier_label = req.tier;
  tier_served = req.tier;
  known = req.prompt;
}

std::string RequestState::push_token(int32_t token, EndKind* end) {
  known.push_back(token);
  ++n_generated;
  tok::TextEnd why = tok::TextEnd::kNone;
  std::string out = text_.push(token, &why);
  *end = why == tok::TextEnd::kNone ? EndKind::kNone : why == tok::TextEnd::kLength ? EndKind::kLength : EndKind::kStop;
  return out;
}

}  // namespace ts::serving
