// Reading typed values out of a yaml-cpp tree, for the config files of `serve` and
// `gateway`. Every reader names the key's path in its error ("tiers[1].share_min: expected
// a finite number"); errors are thrown as ConfigParseError inside a parser and turned into
// a Status by its caller (yaml-cpp itself throws, so all of this runs inside a try block).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "server/config.h"

namespace ts::server::yaml {

struct ConfigParseError {
  std::string message;  // "path: what is wrong"
};

[[noreturn]] void fail(const std::string& path, const std::string& msg);
// "a.b" + "c" -> "a.b.c" ("" + "c" -> "c").
std::string join(const std::string& path, const std::string& key);
// `n` is a mapping whose keys are all in `allowed` (else "unknown key (expected one of ...)").
void check_keys(const YAML::Node& n, const std::string& path, std::initializer_list<const char*> allowed);

std::string scalar(const YAML::Node& n, const std::string& path);
int64_t get_int(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi);
double get_double(const YAML::Node& n, const std::string& path);  // finite
bool get_bool(const YAML::Node& n, const std::string& path);      // true/false, on/off, yes/no
inline std::string get_str(const YAML::Node& n, const std::string& path) { return scalar(n, path); }
std::vector<std::string> get_str_list(const YAML::Node& n, const std::string& path);
// A string, or a list of strings (`served_name: a` and `served_name: [a, b]`).
std::vector<std::string> get_str_or_list(const YAML::Node& n, const std::string& path);

constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64 = std::numeric_limits<int64_t>::max();

// {host, port}; ports below min_port are refused (-1 where "none" is allowed).
void parse_listen(const YAML::Node& n, const std::string& path, ListenConfig& l, int64_t min_port);
// One entry of `keys:` (an API key's hash, tiers and limits).
KeyConfig parse_key(const YAML::Node& n, const std::string& path);
// The root's `keys:` list, then the keys of `keys_file:` (a YAML file with a `keys:` list
// of its own, e.g. mounted from a Kubernetes Secret so that key hashes stay out of the
// config's ConfigMap), appended to `out`.
void parse_keys(const YAML::Node& root, std::vector<KeyConfig>& out);
// The root's `request_priorities:` (tier: lowest priority) into `out`; without one, the
// defaults for the tiers `configured` says exist stay, the others go.
void parse_request_priorities(const YAML::Node& root, RequestPriorities& out,
                              const std::function<bool(const std::string&)>& configured);

}  // namespace ts::server::yaml
