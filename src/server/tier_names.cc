#include "server/tier_names.h"

#include <algorithm>
#include <set>

namespace ts::server {

std::optional<std::string> resolve_service_tier(const std::string& asked, const std::vector<std::string>& tiers,
                                                const std::map<std::string, std::string>& aliases) {
  if (asked == "auto") return std::string();
  if (std::find(tiers.begin(), tiers.end(), asked) != tiers.end()) return asked;
  // OpenAI's newer names: fast for priority, scale (an enterprise tier) for default.
  const std::string v = asked == "fast" ? "priority" : asked == "scale" ? "default" : asked;
  if (auto it = aliases.find(v); it != aliases.end()) return it->second;
  return std::nullopt;
}

std::string openai_service_tier(const std::string& tier, const std::map<std::string, std::string>& aliases) {
  for (const char* v : {"priority", "default", "flex", "scale"})
    if (auto it = aliases.find(v); it != aliases.end() && it->second == tier) return v;
  return "default";
}

RequestPriorities default_request_priorities() { return {{"ultrafast", 100}, {"standard", 0}, {"batch", -10}}; }

std::string tier_for_priority(const RequestPriorities& thresholds, int64_t priority) {
  const std::string* best = nullptr;
  const std::string* lowest = nullptr;
  int64_t best_at = 0, lowest_at = 0;
  for (const auto& [tier, at] : thresholds) {
    if (!lowest || at < lowest_at) lowest = &tier, lowest_at = at;
    if (at <= priority && (!best || at > best_at)) best = &tier, best_at = at;
  }
  return best ? *best : lowest ? *lowest : std::string();
}

Status check_request_priorities(const RequestPriorities& p, const std::vector<std::string>& tiers,
                                const std::string& field) {
  std::set<int32_t> seen;
  for (const auto& [tier, at] : p) {
    if (std::find(tiers.begin(), tiers.end(), tier) == tiers.end())
      return invalid_argument(field + "." + tier + ": not a configured tier");
    if (!seen.insert(at).second)
      return invalid_argument(field + "." + tier + ": priority " + std::to_string(at) + " is given to two tiers");
  }
  return Status::ok();
}

}  // namespace ts::server
