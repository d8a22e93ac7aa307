// How a request names its tier, shared by `serve` and the gateway: OpenAI's service_tier
// values and one's own aliases, and the Gateway API Inference Extension's integer
// `priority` (higher = more urgent: what an InferenceObjective declares and the Endpoint
// Picker passes on). docs/server.md has the mapping table.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ts::server {

// service_tier -> a tier name: a tier's own name; OpenAI's values through `aliases`
// ("fast" is read as priority, "scale" as default); "" for "auto" (the key's default tier,
// else the server's). nullopt when nothing matches.
std::optional<std::string> resolve_service_tier(const std::string& asked, const std::vector<std::string>& tiers,
                                                const std::map<std::string, std::string>& aliases);

// The OpenAI value responses carry for a tier: the first of priority, default, flex, scale
// that `aliases` maps to it; "default" when none does (validation prevents that).
std::string openai_service_tier(const std::string& tier, const std::map<std::string, std::string>& aliases);

// tier -> the lowest request priority that is served on it (request_priorities in the
// configs; by default ultrafast 100, standard 0, batch -10, the objectives of deploy/k8s).
using RequestPriorities = std::map<std::string, int32_t>;
RequestPriorities default_request_priorities();

// A request's priority -> the tier with the highest threshold at or below it; below every
// threshold, the tier with the lowest. `thresholds` must not be empty.
std::string tier_for_priority(const RequestPriorities& thresholds, int64_t priority);

// Every key a configured tier, thresholds distinct; `field` names the config key in errors.
Status check_request_priorities(const RequestPriorities& p, const std::vector<std::string>& tiers,
                                const std::string& field);

}  // namespace ts::server
