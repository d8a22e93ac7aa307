#include "server/yaml_read.h"

#include <cmath>

namespace ts::server::yaml {

[[noreturn]] void fail(const std::string& path, const std::string& msg) { throw ConfigParseError{path + ": " + msg}; }

std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

void check_keys(const YAML::Node& n, const std::string& path, std::initializer_list<const char*> allowed) {
  if (!n.IsMap()) fail(path.empty() ? "(top level)" : path, "expected a mapping");
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
      fail(join(path, k), "unknown key (expected one of: " + list + ")");
    }
  }
}

std::string scalar(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) fail(path, "expected a scalar value");
  return n.Scalar();
}

int64_t get_int(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi) {
  const std::string s = scalar(n, path);
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(s, &used, 0);
  } catch (...) {
    fail(path, "expected an integer, got '" + s + "'");
  }
  if (used != s.size()) fail(path, "expected an integer, got '" + s + "'");
  if (v < lo || v > hi) fail(path, std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

double get_double(const YAML::Node& n, const std::string& path) {
  const std::string s = scalar(n, path);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    fail(path, "expected a number, got '" + s + "'");
  }
  if (used != s.size() || !std::isfinite(v)) fail(path, "expected a finite number, got '" + s + "'");
  return v;
}

bool get_bool(const YAML::Node& n, const std::string& path) {
  const std::string s = scalar(n, path);
  if (s == "true" || s == "on" || s == "yes") return true;
  if (s == "false" || s == "off" || s == "no") return false;
  fail(path, "expected true or false, got '" + s + "'");
}

std::vector<std::string> get_str_list(const YAML::Node& n, const std::string& path) {
  if (!n.IsSequence()) fail(path, "expected a list");
  std::vector<std::string> v;
  for (size_t i = 0; i < n.size(); ++i) v.push_back(scalar(n[i], path + "[" + std::to_string(i) + "]"));
  return v;
}

void parse_listen(const YAML::Node& n, const std::string& path, ListenConfig& l, int64_t min_port) {
  check_keys(n, path, {"host", "port"});
  if (n["host"]) l.host = get_str(n["host"], path + ".host");
  if (n["port"]) l.port = int32_t(get_int(n["port"], path + ".port", min_port, 65535));
}

std::vector<std::string> get_str_or_list(const YAML::Node& n, const std::string& path) {
  return n.IsSequence() ? get_str_list(n, path) : std::vector<std::string>{get_str(n, path)};
}

KeyConfig parse_key(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"name", "sha256", "tiers", "default_tier", "requests_per_min", "tokens_per_min", "max_concurrent"});
  KeyConfig k;
  if (n["name"]) k.name = get_str(n["name"], path + ".name");
  if (!n["sha256"]) fail(path, "a key needs sha256 (the hash of the key: tierserve serve --hash-key KEY)");
  k.sha256 = get_str(n["sha256"], path + ".sha256");
  if (n["tiers"]) k.tiers = get_str_list(n["tiers"], path + ".tiers");
  if (n["default_tier"]) k.default_tier = get_str(n["default_tier"], path + ".default_tier");
  if (n["requests_per_min"]) k.requests_per_min = get_int(n["requests_per_min"], path + ".requests_per_min", 0, kI64 / 2);
  if (n["tokens_per_min"]) k.tokens_per_min = get_int(n["tokens_per_min"], path + ".tokens_per_min", 0, kI64 / 2);
  if (n["max_concurrent"]) k.max_concurrent = int32_t(get_int(n["max_concurrent"], path + ".max_concurrent", 0, kI32));
  return k;
}

void parse_keys(const YAML::Node& root, std::vector<KeyConfig>& out) {
  if (const YAML::Node k = root["keys"]; k && !k.IsNull()) {  // `keys:` with nothing: none
    if (!k.IsSequence()) fail("keys", "expected a list of keys");
    for (size_t i = 0; i < k.size(); ++i) out.push_back(parse_key(k[i], "keys[" + std::to_string(i) + "]"));
  }
  const YAML::Node f = root["keys_file"];
  if (!f) return;
  const std::string path = get_str(f, "keys_file");
  YAML::Node file;
  try {
    file = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    fail("keys_file", "cannot read '" + path + "'");
  } catch (const YAML::Exception& e) {
    fail("keys_file", "'" + path + "': " + e.msg);
  }
  if (!file || file.IsNull()) return;  // an empty file: no keys
  if (!file.IsMap()) fail("keys_file", "'" + path + "': expected a mapping with a keys: list");
  check_keys(file, "keys_file", {"keys"});
  const YAML::Node k = file["keys"];
  if (!k) return;
  if (!k.IsSequence()) fail("keys_file", "'" + path + "': keys: expected a list of keys");
  for (size_t i = 0; i < k.size(); ++i) out.push_back(parse_key(k[i], "keys_file:keys[" + std::to_string(i) + "]"));
}

void parse_request_priorities(const YAML::Node& root, RequestPriorities& out,
                              const std::function<bool(const std::string&)>& configured) {
  if (const YAML::Node a = root["request_priorities"]) {
    if (!a.IsMap()) fail("request_priorities", "expected a mapping of tier: lowest priority");
    out.clear();
    for (const auto& kv : a) {
      const std::string k = kv.first.as<std::string>();
      out[k] = int32_t(get_int(kv.second, "request_priorities." + k, INT32_MIN, INT32_MAX));
    }
    return;
  }
  for (auto it = out.begin(); it != out.end();) it = configured(it->first) ? std::next(it) : out.erase(it);
}

}  // namespace ts::server::yaml
