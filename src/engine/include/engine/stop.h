// Stop strings: a pure function over the text generated so far, so the CLI, the server and
// the scheduler agree on when a sequence ends and which text may already be streamed.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace ts::engine {

struct StopCheck {
  bool stopped = false;  // some stop string occurs in the text
  // stopped: the text to keep is text[0, end) (everything before the earliest stop
  // string). Otherwise: text[0, end) is safe to emit; the rest could still become the
  // start of a stop string and must be held back.
  size_t end = 0;
};

// Checks `text` against `stops` (empty stop strings are ignored). Only occurrences that
// end at or after `new_from` are searched for (text before it was checked by an earlier
// call), so checking after each token costs O(new text + longest stop).
StopCheck check_stop(std::string_view text, std::span<const std::string> stops, size_t new_from = 0);

}  // namespace ts::engine
