#include "draft.h"

#include <algorithm>

namespace ts::serving {

std::vector<int32_t> propose_drafts(std::span<const int32_t> known, const DraftOptions& o) {
  const int64_t n = int64_t(known.size());
  if (o.max_drafts < 1 || o.min_ngram < 1 || o.max_ngram < o.min_ngram) return {};
  for (int64_t g = std::min<int64_t>(o.max_ngram, n - 1); g >= o.min_ngram; --g) {
    const auto suffix = known.subspan(size_t(n - g));
    // Most recent earlier occurrence: start positions n-g-1 down to 0 (an occurrence may
    // overlap the suffix itself, as in a run of one repeated token).
    for (int64_t start = n - g - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), known.begin() + start)) continue;
      const int64_t from = start + g, to = std::min<int64_t>(n, from + o.max_drafts);
      return std::vector<int32_t>(known.begin() + from, known.begin() + to);
    }
  }
  return {};
}

}  // namespace ts::serving
