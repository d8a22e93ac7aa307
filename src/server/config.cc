// YAML -> ServerConfig. yaml-cpp throws; every call into it is inside parse_config's
// try block, and type errors are reported with the path of the offending key.
#include "server/config.h"

#include "server/yaml_read.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace ts::server {
namespace {

using namespace yaml;

// An integer, or "auto" (a value derived at start), given as `auto_value`.
int64_t get_int_or_auto(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi, int64_t auto_value) {
  if (n.IsScalar() && n.Scalar() == "auto") return auto_value;
  return get_int(n, path, lo, hi);
}

void set_tier_field(sched::TierConfig& t, const std::string& key, const YAML::Node& v, const std::string& path) {
  if (key == "name") {
    t.name = get_str(v, path);
  } else if (key == "priority") {
    t.priority = int32_t(get_int(v, path, 0, kI32));
  } else if (key == "share_min") {
    t.share_min = get_double(v, path);
  } else if (key == "share_max") {
    t.share_max = get_double(v, path);
  } else if (key == "borrow") {
    t.borrow = get_bool(v, path);
  } else if (key == "max_queue_wait_ms") {
    t.max_queue_wait_ms = get_int(v, path, 0, kI64 / 1000000);
  } else if (key == "on_timeout") {
    auto r = sched::parse_on_timeout(get_str(v, path));
    if (!r.is_ok()) fail(path, r.status().message());
    t.on_timeout = *r;
  } else if (key == "on_predicted_wait") {
    auto r = sched::parse_on_predicted_wait(get_str(v, path));
    if (!r.is_ok()) fail(path, r.status().message());
    t.on_predicted_wait = *r;
  } else if (key == "max_queued_requests") {
    t.max_queued_requests = int32_t(get_int(v, path, 0, kI32));
  } else if (key == "max_queued_tokens") {
    t.max_queued_tokens = get_int(v, path, 0, kI64);
  } else if (key == "max_batch") {
    t.max_batch = int32_t(get_int(v, path, 1, kI32));
  } else if (key == "speculative") {
    t.speculative = get_bool(v, path);
  } else if (key == "preemption_budget") {
    t.preemption_budget = int32_t(get_int(v, path, 0, kI32));
  } else if (key == "burst_tokens") {
    t.burst_tokens = get_int_or_auto(v, path, 0, 1 << 24, -1);
  } else if (key == "interrupt") {
    t.interrupt = get_bool(v, path);
  } else if (key == "queue") {
    auto r = sched::parse_queue_kind(get_str(v, path));
    if (!r.is_ok()) fail(path, r.status().message());
    t.queue = *r;
  } else {
    fail(path,
         "unknown tier field (expected name, priority, share_min, share_max, borrow, max_queue_wait_ms, on_timeout, "
         "on_predicted_wait, max_queued_requests, max_queued_tokens, max_batch, speculative, preemption_budget, "
         "burst_tokens, interrupt, queue)");
  }
}

// A tier given in the file starts from the default tier of the same name when there is
// one (so `- {name: standard, max_queued_requests: 8}` changes one field), else from the
// TierConfig defaults.
sched::TierConfig parse_tier(const YAML::Node& n, const std::string& path, int32_t index) {
  if (!n.IsMap()) fail(path, "expected a mapping");
  if (!n["name"]) fail(path, "a tier needs a name");
  const std::string name = get_str(n["name"], path + ".name");
  sched::TierConfig t;
  t.priority = index;
  for (const auto& d : server_default_sched().tiers)
    if (d.name == name) t = d;
  t.name = name;
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    set_tier_field(t, k, kv.second, path + "." + k);
  }
  return t;
}

}  // namespace

sched::SchedConfig server_default_sched() {
  sched::SchedConfig c = sched::default_config();
  c.step_token_budget = 0;  // auto
  for (sched::TierConfig& t : c.tiers)
    if (t.burst_tokens > 0) t.burst_tokens = -1;  // auto
  return c;
}

namespace {

void parse_root(const YAML::Node& root, ServerConfig& c) {
  if (!root || root.IsNull()) return;  // an empty file: all defaults
  check_keys(root, "", {"listen", "admin", "model", "engine", "speculative", "scheduling", "scheduler", "tiers", "tier_aliases", "request_priorities",
                        "default_tier", "limits", "http", "drain_timeout_ms", "on_unentitled", "keys", "keys_file", "metrics", "log"});
  if (const YAML::Node m = root["metrics"]) {
    check_keys(m, "metrics", {"vllm_names"});
    if (m["vllm_names"]) c.metrics.vllm_names = get_bool(m["vllm_names"], "metrics.vllm_names");
  }
  if (const YAML::Node l = root["log"]) {
    check_keys(l, "log", {"format", "access"});
    if (l["format"]) {
      c.log.format = get_str(l["format"], "log.format");
      if (c.log.format != "text" && c.log.format != "json") fail("log.format", "expected text or json, got '" + c.log.format + "'");
    }
    if (l["access"]) c.log.access = get_bool(l["access"], "log.access");
  }
  if (root["listen"]) parse_listen(root["listen"], "listen", c.listen, 0);
  if (root["admin"]) parse_listen(root["admin"], "admin", c.admin, -1);
  if (const YAML::Node m = root["model"]) {
    check_keys(m, "model", {"path", "threads", "flash_attn", "map_pack", "map_plan", "served_name", "system_prompt", "sampling"});
    if (m["system_prompt"]) c.model.system_prompt = get_str(m["system_prompt"], "model.system_prompt");
    if (const YAML::Node sm = m["sampling"]) {
      check_keys(sm, "model.sampling", {"temperature", "top_p", "top_k", "min_p", "repetition_penalty"});
      SamplingDefaults& d = c.model.sampling;
      auto in = [&](const char* k, double lo, double hi, double& v) {  // lo and hi are whole or 0.01
        auto num = [](double x) {
          std::ostringstream o;
          o << x;
          return o.str();
        };
        if (!sm[k]) return;
        const std::string path = std::string("model.sampling.") + k;
        v = get_double(sm[k], path);
        if (v < lo || v > hi) fail(path, "expected a value in [" + num(lo) + ", " + num(hi) + "]");
      };
      in("temperature", 0.0, 2.0, d.temperature);
      in("top_p", 0.0, 1.0, d.top_p);
      in("min_p", 0.0, 1.0, d.min_p);
      in("repetition_penalty", 0.01, 10.0, d.repetition_penalty);
      if (sm["top_k"]) d.top_k = int32_t(get_int(sm["top_k"], "model.sampling.top_k", 0, 1 << 30));
    }
    if (const YAML::Node n = m["served_name"]) {
      c.model.served_names = get_str_or_list(n, "model.served_name");
      for (const auto& name : c.model.served_names)
        if (name.empty()) fail("model.served_name", "a name is empty");
    }
    if (m["path"]) c.model.path = get_str(m["path"], "model.path");
    if (m["threads"]) c.model.threads = int32_t(get_int(m["threads"], "model.threads", 0, 1024));
    if (m["flash_attn"]) {
      const std::string fa = scalar(m["flash_attn"], "model.flash_attn");
      if (fa == "tiled")
        c.model.flash_attn = fa;
      else if (fa == "true" || fa == "on" || fa == "yes")
        c.model.flash_attn = "on";
      else if (fa == "false" || fa == "off" || fa == "no")
        c.model.flash_attn = "off";
      else
        fail("model.flash_attn", "expected true, false or tiled, got '" + fa + "'");
    }
    if (m["map_pack"]) c.model.map_pack = get_bool(m["map_pack"], "model.map_pack");
    // Its name while pack files were called plans: older configs keep working.
    else if (m["map_plan"]) c.model.map_pack = get_bool(m["map_plan"], "model.map_plan");
  }
  if (const YAML::Node e = root["engine"]) {
    check_keys(e, "engine", {"kv_bytes", "block_size", "max_seq_len", "max_step_tokens", "prefix_cache"});
    if (e["kv_bytes"]) c.engine.kv_bytes = uint64_t(get_int(e["kv_bytes"], "engine.kv_bytes", 0, kI64));
    if (e["block_size"]) c.engine.block_size = int32_t(get_int(e["block_size"], "engine.block_size", 1, 4096));
    if (e["max_seq_len"]) c.engine.max_seq_len = get_int(e["max_seq_len"], "engine.max_seq_len", 0, 1 << 24);
    if (e["max_step_tokens"]) c.engine.max_step_tokens = get_int(e["max_step_tokens"], "engine.max_step_tokens", 1, 1 << 20);
    if (e["prefix_cache"]) c.engine.prefix_cache = get_bool(e["prefix_cache"], "engine.prefix_cache");
  }
  if (const YAML::Node sp = root["speculative"]) {
    check_keys(sp, "speculative", {"max_drafts", "max_ngram", "min_ngram"});
    if (sp["max_drafts"]) c.speculative.max_drafts = int32_t(get_int(sp["max_drafts"], "speculative.max_drafts", 0, 64));
    if (sp["max_ngram"]) c.speculative.max_ngram = int32_t(get_int(sp["max_ngram"], "speculative.max_ngram", 1, 64));
    if (sp["min_ngram"]) c.speculative.min_ngram = int32_t(get_int(sp["min_ngram"], "speculative.min_ngram", 1, 64));
  }
  if (root["scheduling"]) {
    const std::string s = get_str(root["scheduling"], "scheduling");
    if (s == "tiered") c.fifo = false;
    else if (s == "fifo") c.fifo = true;
    else fail("scheduling", "expected tiered or fifo, got '" + s + "'");
  }
  if (const YAML::Node s = root["scheduler"]) {
    check_keys(s, "scheduler", {"step_token_budget", "max_segment_ms", "max_chunk_tokens", "max_queued_requests_total",
                                "max_queued_tokens_total", "service_rate_window_ms", "kv_reserve_tokens",
                                "share_window_steps"});
    auto& q = c.sched;
    if (s["step_token_budget"])
      q.step_token_budget = get_int_or_auto(s["step_token_budget"], "scheduler.step_token_budget", 1, 1 << 24, 0);
    if (s["max_segment_ms"]) {
      q.max_segment_ms = get_double(s["max_segment_ms"], "scheduler.max_segment_ms");
      if (!(q.max_segment_ms > 0) || q.max_segment_ms > 60000) fail("scheduler.max_segment_ms", "must be in (0, 60000]");
    }
    if (s["max_chunk_tokens"]) q.max_chunk_tokens = get_int(s["max_chunk_tokens"], "scheduler.max_chunk_tokens", 0, 1 << 24);
    if (s["max_queued_requests_total"])
      q.max_queued_requests_total = int32_t(get_int(s["max_queued_requests_total"], "scheduler.max_queued_requests_total", 0, kI32));
    if (s["max_queued_tokens_total"])
      q.max_queued_tokens_total = get_int(s["max_queued_tokens_total"], "scheduler.max_queued_tokens_total", 0, kI64);
    if (s["service_rate_window_ms"])
      q.service_rate_window_ms = get_int(s["service_rate_window_ms"], "scheduler.service_rate_window_ms", 1, kI64 / 1000000);
    if (s["kv_reserve_tokens"]) q.kv_reserve_tokens = get_int(s["kv_reserve_tokens"], "scheduler.kv_reserve_tokens", 0, 1 << 24);
    if (s["share_window_steps"])
      q.share_window_steps = int32_t(get_int(s["share_window_steps"], "scheduler.share_window_steps", 1, 1 << 20));
  }
  if (const YAML::Node t = root["tiers"]) {
    if (!t.IsSequence()) fail("tiers", "expected a list of tiers");
    c.sched.tiers.clear();
    for (size_t i = 0; i < t.size(); ++i)
      c.sched.tiers.push_back(parse_tier(t[i], "tiers[" + std::to_string(i) + "]", int32_t(i)));
  }
  if (const YAML::Node a = root["tier_aliases"]) {
    if (!a.IsMap()) fail("tier_aliases", "expected a mapping of alias: tier");
    c.tier_aliases.clear();
    for (const auto& kv : a) {
      const std::string k = kv.first.as<std::string>();
      c.tier_aliases[k] = get_str(kv.second, "tier_aliases." + k);
    }
  } else {
    // The default aliases name the default tiers; those a file's tier list leaves out go.
    for (auto it = c.tier_aliases.begin(); it != c.tier_aliases.end();) {
      const bool configured = std::any_of(c.sched.tiers.begin(), c.sched.tiers.end(),
                                          [&](const sched::TierConfig& t) { return t.name == it->second; });
      it = configured ? std::next(it) : c.tier_aliases.erase(it);
    }
  }
  parse_request_priorities(root, c.request_priorities, [&](const std::string& name) {
    return std::any_of(c.sched.tiers.begin(), c.sched.tiers.end(), [&](const sched::TierConfig& t) { return t.name == name; });
  });
  if (root["default_tier"]) c.default_tier = get_str(root["default_tier"], "default_tier");
  if (const YAML::Node l = root["limits"]) {
    check_keys(l, "limits", {"max_header_bytes", "max_body_bytes", "max_tokens_cap", "default_max_tokens",
                             "max_stop_strings", "max_messages", "max_json_depth"});
    auto& m = c.limits;
    if (l["max_header_bytes"]) m.max_header_bytes = get_int(l["max_header_bytes"], "limits.max_header_bytes", 512, 1 << 24);
    if (l["max_body_bytes"]) m.max_body_bytes = get_int(l["max_body_bytes"], "limits.max_body_bytes", 64, int64_t(1) << 32);
    if (l["max_tokens_cap"]) m.max_tokens_cap = get_int(l["max_tokens_cap"], "limits.max_tokens_cap", 0, 1 << 24);
    if (l["default_max_tokens"]) m.default_max_tokens = get_int(l["default_max_tokens"], "limits.default_max_tokens", 1, 1 << 24);
    if (l["max_stop_strings"]) m.max_stop_strings = int32_t(get_int(l["max_stop_strings"], "limits.max_stop_strings", 0, 1024));
    if (l["max_messages"]) m.max_messages = int32_t(get_int(l["max_messages"], "limits.max_messages", 1, 1 << 20));
    if (l["max_json_depth"]) m.max_json_depth = int32_t(get_int(l["max_json_depth"], "limits.max_json_depth", 4, 512));
  }
  if (const YAML::Node h = root["http"]) {
    check_keys(h, "http", {"threads", "idle_timeout_ms", "read_timeout_ms", "write_timeout_ms", "max_connections",
                           "queued_notice_ms"});
    if (h["queued_notice_ms"])
      c.http.queued_notice_ms = get_int(h["queued_notice_ms"], "http.queued_notice_ms", 0, kI64 / 1000000);
    if (h["threads"]) c.http.threads = int32_t(get_int(h["threads"], "http.threads", 1, 256));
    if (h["idle_timeout_ms"]) c.http.idle_timeout_ms = get_int(h["idle_timeout_ms"], "http.idle_timeout_ms", 1, kI64 / 1000000);
    if (h["read_timeout_ms"]) c.http.read_timeout_ms = get_int(h["read_timeout_ms"], "http.read_timeout_ms", 1, kI64 / 1000000);
    if (h["write_timeout_ms"]) c.http.write_timeout_ms = get_int(h["write_timeout_ms"], "http.write_timeout_ms", 1, kI64 / 1000000);
    if (h["max_connections"]) c.http.max_connections = get_int(h["max_connections"], "http.max_connections", 0, 1 << 24);
  }
  if (root["drain_timeout_ms"]) c.drain_timeout_ms = get_int(root["drain_timeout_ms"], "drain_timeout_ms", 0, kI64 / 1000000);
  if (root["on_unentitled"]) {
    const std::string s = get_str(root["on_unentitled"], "on_unentitled");
    if (s == "downgrade") c.on_unentitled = OnUnentitled::kDowngrade;
    else if (s == "reject") c.on_unentitled = OnUnentitled::kReject;
    else fail("on_unentitled", "expected downgrade or reject, got '" + s + "'");
  }
  parse_keys(root, c.keys);
}

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char ch : s)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  return true;
}

}  // namespace

Result<ServerConfig> parse_config(std::string_view yaml_text, std::string_view origin) {
  ServerConfig c;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    parse_root(root, c);
  } catch (const ConfigParseError& e) {
    return invalid_argument(std::string(origin) + ": " + e.message);
  } catch (const YAML::Exception& e) {
    return invalid_argument(std::string(origin) + ": " + e.what());
  } catch (const std::exception& e) {
    return invalid_argument(std::string(origin) + ": " + e.what());
  }
  return c;
}

Result<ServerConfig> load_config(const std::string& path) { return load_layered_config(path, {}, {}); }

Result<ConfigOverride> parse_set(std::string_view assignment) {
  const size_t eq = assignment.find('=');
  ConfigOverride o;
  o.origin = "--set " + std::string(assignment.substr(0, eq));
  if (eq == std::string_view::npos || eq == 0)
    return invalid_argument("--set '" + std::string(assignment) + "': expected KEY=VALUE (e.g. scheduler.step_token_budget=64)");
  o.path = std::string(assignment.substr(0, eq));
  o.value = std::string(assignment.substr(eq + 1));
  for (char ch : o.path)
    if (!(std::islower(static_cast<unsigned char>(ch)) || std::isdigit(static_cast<unsigned char>(ch)) || ch == '_' ||
          ch == '.'))
      return invalid_argument("--set '" + o.path + "': a key path is lowercase words separated by dots");
  if (o.path.front() == '.' || o.path.back() == '.' || o.path.find("..") != std::string::npos)
    return invalid_argument("--set '" + o.path + "': empty key segment");
  return o;
}

std::vector<ConfigOverride> env_overrides(const char* const* env) {
  // Top-level keys that hold a scalar: the only ones a single-segment variable can name.
  static const std::set<std::string> kScalars = {"scheduling", "default_tier", "drain_timeout_ms", "on_unentitled", "keys_file"};
  std::vector<ConfigOverride> out;
  constexpr std::string_view kPrefix = "TIERSERVE_";
  for (const char* const* e = env; e && *e; ++e) {
    const std::string_view entry(*e);
    if (entry.substr(0, kPrefix.size()) != kPrefix) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string name(entry.substr(kPrefix.size(), eq - kPrefix.size()));
    std::string path;
    for (char ch : name) path += char(std::tolower(static_cast<unsigned char>(ch)));
    const bool nested = path.find("__") != std::string::npos;
    if (!nested && !kScalars.count(path)) continue;
    for (size_t p; (p = path.find("__")) != std::string::npos;) path.replace(p, 2, ".");
    out.push_back({path, std::string(entry.substr(eq + 1)), std::string(entry.substr(0, eq)) + " (environment)"});
  }
  return out;
}

namespace {

// Sets path to the YAML value of `value` in `root` (maps created on the way). Tier paths
// (tiers.NAME.FIELD) are returned in `tier_sets` for apply_tier_override, which knows the
// default tiers a file may not list.
void apply_yaml_override(YAML::Node& root, const ConfigOverride& o, std::vector<ConfigOverride>& tier_sets) {
  std::vector<std::string> seg;
  for (size_t start = 0;;) {
    const size_t dot = o.path.find('.', start);
    seg.push_back(o.path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (seg.front() == "tiers") {
    if (seg.size() != 3) fail(o.origin, "tiers are set as tiers.NAME.FIELD");
    tier_sets.push_back(o);
    return;
  }
  YAML::Node value;
  try {
    value = YAML::Load(o.value);
  } catch (const YAML::Exception& e) {
    fail(o.origin, std::string("not a YAML value: ") + e.what());
  }
  if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
  std::vector<YAML::Node> path{root};
  for (size_t i = 0; i + 1 < seg.size(); ++i) {
    YAML::Node next = path.back()[seg[i]];
    if (!next || next.IsNull()) {
      path.back()[seg[i]] = YAML::Node(YAML::NodeType::Map);
      next = path.back()[seg[i]];
    }
    if (!next.IsMap()) fail(o.origin, "'" + seg[i] + "' does not hold keys");
    path.push_back(next);
  }
  path.back()[seg.back()] = value;
}

}  // namespace

Result<ServerConfig> load_layered_config(const std::string& path, const std::vector<ConfigOverride>& env,
                                         const std::vector<ConfigOverride>& sets) {
  std::string text, origin = "config";
  if (!path.empty()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return not_found("cannot read config file " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    origin = path;
  }
  ServerConfig c;
  std::vector<ConfigOverride> tier_sets;
  try {
    YAML::Node root = YAML::Load(text);
    try {
      for (const auto& o : env) apply_yaml_override(root, o, tier_sets);
      for (const auto& o : sets) apply_yaml_override(root, o, tier_sets);
    } catch (const ConfigParseError& e) {
      return invalid_argument(e.message);
    }
    parse_root(root, c);
  } catch (const ConfigParseError& e) {
    // A key named by an override is reported with where it came from: the message starts
    // with the key path it is about, which is the override's path or a part of it.
    std::string where = origin;
    const std::string key = e.message.substr(0, e.message.find(':'));
    auto covers = [&](const std::string& p) {
      return p == key || (p.size() > key.size() && p.compare(0, key.size(), key) == 0 && p[key.size()] == '.') ||
             (key.size() > p.size() && key.compare(0, p.size(), p) == 0 && key[p.size()] == '.');
    };
    for (const auto* layer : {&env, &sets})
      for (const auto& o : *layer)
        if (covers(o.path)) where = o.origin;
    return invalid_argument(where + ": " + e.message);
  } catch (const YAML::Exception& e) {
    return invalid_argument(origin + ": " + e.what());
  } catch (const std::exception& e) {
    return invalid_argument(origin + ": " + e.what());
  }
  for (const auto& o : tier_sets) {
    const std::string name_field = o.path.substr(6);  // NAME.FIELD
    Status st = apply_tier_override(c, name_field + "=" + o.value);
    if (!st.is_ok()) return invalid_argument(o.origin + ": " + st.message());
  }
  return c;
}

Status validate(const ServerConfig& c) {
  if (auto e = sched::check_config(c.sched)) return e->to_status();
  std::set<std::string> tiers;
  for (const auto& t : c.sched.tiers) tiers.insert(t.name);
  auto is_tier = [&](const std::string& n) { return tiers.count(n) > 0; };
  if (!is_tier(c.default_tier)) return invalid_argument("default_tier '" + c.default_tier + "' is not a configured tier");
  for (const auto& [alias, tier] : c.tier_aliases) {
    if (!is_tier(tier)) return invalid_argument("tier_aliases." + alias + ": '" + tier + "' is not a configured tier");
    if (alias == "auto")
      return invalid_argument("tier_aliases.auto: service_tier 'auto' means the key's default tier, else default_tier; "
                              "it is not an alias");
  }
  if (auto st = check_request_priorities(c.request_priorities, std::vector<std::string>(tiers.begin(), tiers.end()),
                                         "request_priorities");
      !st.is_ok())
    return st;
  for (const auto& t : c.sched.tiers) {
    bool has = false;
    for (const char* v : {"priority", "default", "flex", "scale"}) {
      auto it = c.tier_aliases.find(v);
      has = has || (it != c.tier_aliases.end() && it->second == t.name);
    }
    if (!has)
      return invalid_argument("tier '" + t.name + "' has no OpenAI service_tier value: map one of priority, default, flex "
                              "or scale to it in tier_aliases (responses say it)");
  }
  for (const auto& name : c.model.served_names) {
    // Names go into JSON bodies, log lines and metric labels: printable ASCII, no quotes.
    bool ok = !name.empty() && name.size() <= 256;
    for (unsigned char ch : name) ok = ok && ch > 0x20 && ch < 0x7f && ch != '"' && ch != '\\';
    if (!ok)
      return invalid_argument("model.served_name '" + name.substr(0, 64) +
                              "': 1 to 256 printable ASCII characters without spaces, quotes or backslashes");
  }
  if (c.listen.port < 0 || c.listen.port > 65535) return invalid_argument("listen.port out of range");
  if (c.admin.port >= 0 && c.admin.port == c.listen.port && c.listen.port != 0 && c.admin.host == c.listen.host)
    return invalid_argument("admin and listen use the same address");
  if (c.limits.max_tokens_cap < 0 || c.limits.default_max_tokens < 1) return invalid_argument("limits: tokens out of range");
  if (c.http.threads < 1) return invalid_argument("http.threads must be >= 1");
  if (c.speculative.max_drafts < 0 || c.speculative.max_drafts > 64 || c.speculative.min_ngram < 1 ||
      c.speculative.max_ngram < c.speculative.min_ngram)
    return invalid_argument("speculative: max_drafts in [0, 64] and 1 <= min_ngram <= max_ngram");
  if (c.http.max_connections < 0) return invalid_argument("http.max_connections must be >= 0 (0: unlimited)");
  std::set<std::string> hashes;
  for (size_t i = 0; i < c.keys.size(); ++i) {
    const KeyConfig& k = c.keys[i];
    const std::string p = "keys[" + std::to_string(i) + "]";
    if (!is_hex64(k.sha256)) return invalid_argument(p + ".sha256: expected 64 lowercase hex digits (tierserve serve --hash-key KEY)");
    if (!hashes.insert(k.sha256).second) return invalid_argument(p + ".sha256: the same key is listed twice");
    for (const auto& t : k.tiers)
      if (!is_tier(t)) return invalid_argument(p + ".tiers: '" + t + "' is not a configured tier");
    if (!k.default_tier.empty()) {
      if (!is_tier(k.default_tier)) return invalid_argument(p + ".default_tier: '" + k.default_tier + "' is not a configured tier");
      bool allowed = k.tiers.empty();
      for (const auto& t : k.tiers) allowed = allowed || t == k.default_tier;
      if (!allowed) return invalid_argument(p + ".default_tier: '" + k.default_tier + "' is not among the key's tiers");
    }
    if (k.requests_per_min < 0 || k.tokens_per_min < 0 || k.max_concurrent < 0)
      return invalid_argument(p + ": limits must be >= 0");
  }
  return Status::ok();
}

Status apply_tier_override(ServerConfig& c, std::string_view assignment) {
  const size_t dot = assignment.find('.');
  const size_t eq = assignment.find('=');
  if (dot == std::string_view::npos || eq == std::string_view::npos || dot > eq)
    return invalid_argument("--tier '" + std::string(assignment) + "': expected NAME.FIELD=VALUE");
  const std::string name(assignment.substr(0, dot));
  const std::string field(assignment.substr(dot + 1, eq - dot - 1));
  const std::string value(assignment.substr(eq + 1));
  for (auto& t : c.sched.tiers) {
    if (t.name != name) continue;
    try {
      set_tier_field(t, field, YAML::Node(value), "--tier " + name + "." + field);
    } catch (const ConfigParseError& e) {
      return invalid_argument(e.message);
    }
    return Status::ok();
  }
  return invalid_argument("--tier '" + std::string(assignment) + "': no tier named '" + name + "'");
}

std::string to_yaml(const ServerConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "listen" << YAML::Value << YAML::BeginMap << YAML::Key << "host" << YAML::Value << c.listen.host
      << YAML::Key << "port" << YAML::Value << c.listen.port << YAML::EndMap;
  out << YAML::Key << "admin" << YAML::Value << YAML::BeginMap << YAML::Key << "host" << YAML::Value << c.admin.host
      << YAML::Key << "port" << YAML::Value << c.admin.port << YAML::EndMap;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap << YAML::Key << "path" << YAML::Value << c.model.path
      << YAML::Key << "threads" << YAML::Value << c.model.threads << YAML::Key << "flash_attn" << YAML::Value
      << c.model.flash_attn << YAML::Key << "map_pack" << YAML::Value << c.model.map_pack;
  if (!c.model.served_names.empty()) {
    out << YAML::Key << "served_name" << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& n : c.model.served_names) out << n;
    out << YAML::EndSeq;
  }
  if (!c.model.system_prompt.empty()) out << YAML::Key << "system_prompt" << YAML::Value << c.model.system_prompt;
  const SamplingDefaults& sd = c.model.sampling;
  out << YAML::Key << "sampling" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "temperature" << YAML::Value
      << sd.temperature << YAML::Key << "top_p" << YAML::Value << sd.top_p << YAML::Key << "top_k" << YAML::Value << sd.top_k
      << YAML::Key << "min_p" << YAML::Value << sd.min_p << YAML::Key << "repetition_penalty" << YAML::Value
      << sd.repetition_penalty << YAML::EndMap;
  out << YAML::EndMap;
  out << YAML::Key << "engine" << YAML::Value << YAML::BeginMap << YAML::Key << "kv_bytes" << YAML::Value
      << c.engine.kv_bytes << YAML::Key << "block_size" << YAML::Value << c.engine.block_size << YAML::Key
      << "max_seq_len" << YAML::Value << c.engine.max_seq_len << YAML::Key << "max_step_tokens" << YAML::Value
      << c.engine.max_step_tokens << YAML::Key << "prefix_cache" << YAML::Value << c.engine.prefix_cache << YAML::EndMap;
  out << YAML::Key << "speculative" << YAML::Value << YAML::BeginMap << YAML::Key << "max_drafts" << YAML::Value
      << c.speculative.max_drafts << YAML::Key << "max_ngram" << YAML::Value << c.speculative.max_ngram << YAML::Key
      << "min_ngram" << YAML::Value << c.speculative.min_ngram << YAML::EndMap;
  out << YAML::Key << "scheduling" << YAML::Value << (c.fifo ? "fifo" : "tiered");
  auto int_or_auto = [](int64_t v, int64_t auto_value) { return v == auto_value ? std::string("auto") : std::to_string(v); };
  out << YAML::Key << "scheduler" << YAML::Value << YAML::BeginMap << YAML::Key << "step_token_budget" << YAML::Value
      << int_or_auto(c.sched.step_token_budget, 0) << YAML::Key << "max_segment_ms" << YAML::Value
      << c.sched.max_segment_ms << YAML::Key << "max_chunk_tokens" << YAML::Value << c.sched.max_chunk_tokens
      << YAML::Key << "max_queued_requests_total" << YAML::Value << c.sched.max_queued_requests_total << YAML::Key
      << "max_queued_tokens_total" << YAML::Value << c.sched.max_queued_tokens_total << YAML::Key
      << "service_rate_window_ms" << YAML::Value << c.sched.service_rate_window_ms << YAML::Key << "kv_reserve_tokens"
      << YAML::Value << c.sched.kv_reserve_tokens << YAML::Key << "share_window_steps" << YAML::Value
      << c.sched.share_window_steps << YAML::EndMap;
  out << YAML::Key << "tiers" << YAML::Value << YAML::BeginSeq;
  for (const auto& t : c.sched.tiers) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << t.name << YAML::Key << "priority" << YAML::Value
        << t.priority << YAML::Key << "share_min" << YAML::Value << t.share_min << YAML::Key << "share_max"
        << YAML::Value << t.share_max << YAML::Key << "borrow" << YAML::Value << t.borrow << YAML::Key
        << "max_queue_wait_ms" << YAML::Value << t.max_queue_wait_ms << YAML::Key << "on_timeout" << YAML::Value
        << sched::to_string(t.on_timeout);
    if (t.on_predicted_wait.action != sched::PredictedWaitAction::kFollowTimeout)
      out << YAML::Key << "on_predicted_wait" << YAML::Value << sched::to_string(t.on_predicted_wait);
    out << YAML::Key << "max_queued_requests" << YAML::Value << t.max_queued_requests
        << YAML::Key << "max_queued_tokens" << YAML::Value << t.max_queued_tokens << YAML::Key << "max_batch"
        << YAML::Value << t.max_batch << YAML::Key << "speculative" << YAML::Value << t.speculative << YAML::Key
        << "preemption_budget" << YAML::Value << t.preemption_budget << YAML::Key << "burst_tokens" << YAML::Value
        << int_or_auto(t.burst_tokens, -1) << YAML::Key << "interrupt" << YAML::Value << t.interrupt << YAML::Key << "queue"
        << YAML::Value
        << (t.queue == sched::QueueKind::kFcfs ? "fcfs" : "shortest_prompt_first") << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::Key << "tier_aliases" << YAML::Value << YAML::BeginMap;
  for (const auto& [a, t] : c.tier_aliases) out << YAML::Key << a << YAML::Value << t;
  out << YAML::EndMap;
  out << YAML::Key << "request_priorities" << YAML::Value << YAML::BeginMap;
  for (const auto& [t, p] : c.request_priorities) out << YAML::Key << t << YAML::Value << p;
  out << YAML::EndMap;
  out << YAML::Key << "default_tier" << YAML::Value << c.default_tier;
  out << YAML::Key << "metrics" << YAML::Value << YAML::BeginMap << YAML::Key << "vllm_names" << YAML::Value
      << c.metrics.vllm_names << YAML::EndMap;
  out << YAML::Key << "log" << YAML::Value << YAML::BeginMap << YAML::Key << "format" << YAML::Value << c.log.format
      << YAML::Key << "access" << YAML::Value << c.log.access << YAML::EndMap;
  out << YAML::Key << "limits" << YAML::Value << YAML::BeginMap << YAML::Key << "max_header_bytes" << YAML::Value
      << c.limits.max_header_bytes << YAML::Key << "max_body_bytes" << YAML::Value << c.limits.max_body_bytes
      << YAML::Key << "max_tokens_cap" << YAML::Value << c.limits.max_tokens_cap << YAML::Key << "default_max_tokens"
      << YAML::Value << c.limits.default_max_tokens << YAML::Key << "max_stop_strings" << YAML::Value
      << c.limits.max_stop_strings << YAML::Key << "max_messages" << YAML::Value << c.limits.max_messages << YAML::Key
      << "max_json_depth" << YAML::Value << c.limits.max_json_depth << YAML::EndMap;
  out << YAML::Key << "http" << YAML::Value << YAML::BeginMap << YAML::Key << "threads" << YAML::Value << c.http.threads
      << YAML::Key << "idle_timeout_ms" << YAML::Value << c.http.idle_timeout_ms << YAML::Key << "read_timeout_ms"
      << YAML::Value << c.http.read_timeout_ms << YAML::Key << "write_timeout_ms" << YAML::Value
      << c.http.write_timeout_ms << YAML::Key << "max_connections" << YAML::Value << c.http.max_connections
      << YAML::Key << "queued_notice_ms" << YAML::Value << c.http.queued_notice_ms << YAML::EndMap;
  out << YAML::Key << "drain_timeout_ms" << YAML::Value << c.drain_timeout_ms;
  out << YAML::Key << "on_unentitled" << YAML::Value
      << (c.on_unentitled == OnUnentitled::kDowngrade ? "downgrade" : "reject");
  out << YAML::Key << "keys" << YAML::Value << YAML::BeginSeq;
  for (const auto& k : c.keys) {
    out << YAML::BeginMap << YAML::Key << "name" << YAML::Value << k.name << YAML::Key << "sha256" << YAML::Value
        << k.sha256 << YAML::Key << "tiers" << YAML::Value << YAML::Flow << k.tiers << YAML::Key << "default_tier"
        << YAML::Value << k.default_tier << YAML::Key << "requests_per_min" << YAML::Value << k.requests_per_min
        << YAML::Key << "tokens_per_min" << YAML::Value << k.tokens_per_min << YAML::Key << "max_concurrent"
        << YAML::Value << k.max_concurrent << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace ts::server
