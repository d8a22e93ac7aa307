#include "engine/stop.h"

#include <algorithm>

namespace ts::engine {

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

}  // namespace ts::engine
