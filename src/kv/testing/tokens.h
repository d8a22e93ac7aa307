// The kv tests' shared helper: runs of consecutive token ids, to fill blocks with.
#pragma once

#include <cstdint>
#include <vector>

namespace ts::kv::testing {

// n token ids first, first + 1, ...
inline std::vector<int32_t> toks(int32_t first, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

}  // namespace ts::kv::testing
