// YAML -> GatewayConfig, on the readers of server/yaml_read.h.
#include "gateway/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "server/yaml_read.h"

namespace ts::gateway {
namespace {

using namespace server::yaml;

std::string_view kind_names[] = {"local", "tierserve", "llama.cpp", "vllm"};

WorkerKind parse_kind(const YAML::Node& n, const std::string& path) {
  const std::string s = get_str(n, path);
  for (size_t i = 0; i < std::size(kind_names); ++i)
    if (s == kind_names[i]) return WorkerKind(i);
  fail(path, "unknown worker kind '" + s + "' (expected local, tierserve, llama.cpp or vllm)");
}

// "~/" is $HOME; "${NAME}" is the environment variable NAME (unset: an error naming the key).
std::string expand_path(const std::string& v, const std::string& path) {
  std::string out;
  size_t i = 0;
  if (v.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    if (!home) fail(path, "'~' but HOME is not set");
    out = home;
    i = 1;
  }
  while (i < v.size()) {
    if (v.compare(i, 2, "${") == 0) {
      const size_t close = v.find('}', i);
      if (close == std::string::npos) fail(path, "unclosed ${ in '" + v + "'");
      const std::string name = v.substr(i + 2, close - i - 2);
      const char* val = std::getenv(name.c_str());
      if (!val) fail(path, "the environment variable " + name + " is not set");
      out += val;
      i = close + 1;
    } else {
      out += v[i++];
    }
  }
  return out;
}

WorkerConfig parse_worker(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"name", "kind", "model", "upstream_model", "path", "threads", "args", "url", "api_key", "pool",
                       "max_inflight", "version", "cost_per_hour"});
  WorkerConfig w;
  if (!n["name"]) fail(path, "a worker needs a name");
  w.name = get_str(n["name"], path + ".name");
  if (n["kind"]) w.kind = parse_kind(n["kind"], path + ".kind");
  if (!n["model"]) fail(path, "a worker needs the model name clients ask for (model)");
  w.model = get_str(n["model"], path + ".model");
  if (n["upstream_model"]) w.upstream_model = get_str(n["upstream_model"], path + ".upstream_model");
  if (n["path"]) w.path = expand_path(get_str(n["path"], path + ".path"), path + ".path");
  if (n["threads"]) w.threads = int32_t(get_int(n["threads"], path + ".threads", 0, 1024));
  if (n["args"]) w.args = get_str_list(n["args"], path + ".args");
  if (n["url"]) w.url = get_str(n["url"], path + ".url");
  if (n["api_key"]) w.api_key = get_str(n["api_key"], path + ".api_key");
  if (n["pool"]) w.pool = get_str(n["pool"], path + ".pool");
  if (n["max_inflight"]) w.max_inflight = int32_t(get_int(n["max_inflight"], path + ".max_inflight", 0, 1 << 16));
  if (w.max_inflight == 0) w.max_inflight = w.kind == WorkerKind::kLocal || w.kind == WorkerKind::kTierserve ? 16 : 4;
  if (n["version"]) w.version = get_str(n["version"], path + ".version");
  if (n["cost_per_hour"]) {
    w.cost_per_hour = get_double(n["cost_per_hour"], path + ".cost_per_hour");
    if (w.cost_per_hour < 0) fail(path + ".cost_per_hour", "must be >= 0");
  }
  return w;
}

void parse_on_timeout(const std::string& s, const std::string& path, TierConfig& t) {
  if (s == "promote") {
    t.on_timeout = OnTimeout::kPromote;
  } else if (s == "reject") {
    t.on_timeout = OnTimeout::kReject;
  } else if (s.rfind("downgrade:", 0) == 0 && s.size() > 10) {
    t.on_timeout = OnTimeout::kDowngrade;
    t.downgrade_to = s.substr(10);
  } else {
    fail(path, "expected promote, reject or downgrade:<tier>, got '" + s + "'");
  }
}

// A tier named like a default one starts from it (as in `serve`).
TierConfig parse_tier(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"name", "pools", "borrow", "share_min", "share_max", "max_queue_wait_ms", "on_timeout",
                       "max_queued_requests"});
  if (!n["name"]) fail(path, "a tier needs a name");
  TierConfig t;
  t.name = get_str(n["name"], path + ".name");
  for (const TierConfig& d : default_tiers())
    if (d.name == t.name) t = d;
  if (n["pools"]) t.pools = get_str_list(n["pools"], path + ".pools");
  if (n["borrow"]) t.borrow = get_str_list(n["borrow"], path + ".borrow");
  if (n["share_min"]) t.share_min = get_double(n["share_min"], path + ".share_min");
  if (n["share_max"]) t.share_max = get_double(n["share_max"], path + ".share_max");
  if (n["max_queue_wait_ms"]) t.max_queue_wait_ms = get_int(n["max_queue_wait_ms"], path + ".max_queue_wait_ms", 0, kI64 / 1000000);
  if (n["on_timeout"]) parse_on_timeout(get_str(n["on_timeout"], path + ".on_timeout"), path + ".on_timeout", t);
  if (n["max_queued_requests"])
    t.max_queued_requests = int32_t(get_int(n["max_queued_requests"], path + ".max_queued_requests", 0, kI32));
  return t;
}

RouteRule parse_rule(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"name", "min_prompt_tokens", "max_prompt_tokens", "endpoint", "task", "tier", "target"});
  RouteRule r;
  if (n["name"]) r.name = get_str(n["name"], path + ".name");
  if (n["min_prompt_tokens"]) r.min_prompt_tokens = get_int(n["min_prompt_tokens"], path + ".min_prompt_tokens", 0, kI64);
  if (n["max_prompt_tokens"]) r.max_prompt_tokens = get_int(n["max_prompt_tokens"], path + ".max_prompt_tokens", 0, kI64);
  if (n["endpoint"]) {
    r.endpoint = get_str(n["endpoint"], path + ".endpoint");
    if (r.endpoint != "chat" && r.endpoint != "completion") fail(path + ".endpoint", "expected chat or completion");
  }
  if (n["task"]) r.tasks = get_str_or_list(n["task"], path + ".task");
  if (n["tier"]) r.tiers = get_str_or_list(n["tier"], path + ".tier");
  if (!n["target"]) fail(path, "a rule needs a target model");
  r.target = get_str(n["target"], path + ".target");
  return r;
}

void parse_router(const YAML::Node& n, RouterConfig& r) {
  check_keys(n, "router", {"name", "rules", "classifier", "default", "tasks", "on_saturated", "fallback"});
  if (n["name"]) r.name = get_str(n["name"], "router.name");
  if (const YAML::Node rules = n["rules"]) {
    if (!rules.IsSequence()) fail("router.rules", "expected a list of rules");
    for (size_t i = 0; i < rules.size(); ++i) {
      RouteRule rule = parse_rule(rules[i], "router.rules[" + std::to_string(i) + "]");
      if (rule.name.empty()) rule.name = "rule" + std::to_string(i);
      r.rules.push_back(std::move(rule));
    }
  }
  if (const YAML::Node c = n["classifier"]) {
    check_keys(c, "router.classifier", {"path", "threshold", "labels"});
    if (c["path"]) r.classifier.path = expand_path(get_str(c["path"], "router.classifier.path"), "router.classifier.path");
    if (c["threshold"]) r.classifier.threshold = get_double(c["threshold"], "router.classifier.threshold");
    if (const YAML::Node l = c["labels"]) {
      if (!l.IsMap()) fail("router.classifier.labels", "expected a mapping of label: model");
      for (const auto& kv : l)
        r.classifier.labels[kv.first.as<std::string>()] = get_str(kv.second, "router.classifier.labels." + kv.first.as<std::string>());
    }
  }
  if (n["default"]) r.default_target = get_str(n["default"], "router.default");
  if (const YAML::Node t = n["tasks"]) {
    if (!t.IsMap()) fail("router.tasks", "expected a mapping of task: pattern");
    for (const auto& kv : t) r.tasks[kv.first.as<std::string>()] = get_str(kv.second, "router.tasks." + kv.first.as<std::string>());
  }
  if (n["on_saturated"]) {
    const std::string s = get_str(n["on_saturated"], "router.on_saturated");
    if (s != "queue" && s != "fallback") fail("router.on_saturated", "expected queue or fallback");
    r.fallback_when_saturated = s == "fallback";
  }
  if (const YAML::Node f = n["fallback"]) {
    if (!f.IsMap()) fail("router.fallback", "expected a mapping of model: fallback model");
    for (const auto& kv : f) r.fallback[kv.first.as<std::string>()] = get_str(kv.second, "router.fallback." + kv.first.as<std::string>());
  }
}

void parse_root(const YAML::Node& root, GatewayConfig& c) {
  if (!root || root.IsNull()) return;
  check_keys(root, "", {"listen", "admin", "workers", "tiers", "tier_aliases", "request_priorities", "default_tier", "router", "models", "health", "upstream",
                        "keys", "limits", "http", "log", "drain_timeout_ms", "on_unentitled", "serve_binary", "redis", "cache", "keys_file", "shadow"});
  if (root["listen"]) parse_listen(root["listen"], "listen", c.listen, 0);
  if (root["admin"]) parse_listen(root["admin"], "admin", c.admin, -1);
  if (const YAML::Node w = root["workers"]) {
    if (!w.IsSequence()) fail("workers", "expected a list of workers");
    for (size_t i = 0; i < w.size(); ++i) c.workers.push_back(parse_worker(w[i], "workers[" + std::to_string(i) + "]"));
  }
  if (const YAML::Node t = root["tiers"]) {
    if (!t.IsSequence()) fail("tiers", "expected a list of tiers");
    c.tiers.clear();
    for (size_t i = 0; i < t.size(); ++i) c.tiers.push_back(parse_tier(t[i], "tiers[" + std::to_string(i) + "]"));
  }
  if (const YAML::Node a = root["tier_aliases"]) {
    if (!a.IsMap()) fail("tier_aliases", "expected a mapping of alias: tier");
    c.tier_aliases.clear();
    for (const auto& kv : a) c.tier_aliases[kv.first.as<std::string>()] = get_str(kv.second, "tier_aliases." + kv.first.as<std::string>());
  }
  parse_request_priorities(root, c.request_priorities, [&](const std::string& t) { return c.tier_index(t) >= 0; });
  if (root["default_tier"]) c.default_tier = get_str(root["default_tier"], "default_tier");
  if (root["router"]) parse_router(root["router"], c.router);
  if (const YAML::Node m = root["models"]) {
    if (!m.IsMap()) fail("models", "expected a mapping of model name: {versions, stable, sticky}");
    std::set<std::string> seen;
    for (const auto& kv : m) {
      const std::string name = kv.first.as<std::string>(), path = "models." + name;
      if (!seen.insert(name).second) fail(path, "listed twice (one entry per model)");
      check_keys(kv.second, path, {"versions", "stable", "sticky", "canary", "shadow"});
      ModelRelease r;
      if (const YAML::Node v = kv.second["versions"]) {
        if (!v.IsMap()) fail(path + ".versions", "expected a mapping of version: weight");
        for (const auto& w : v) r.weights[w.first.as<std::string>()] = get_double(w.second, path + ".versions." + w.first.as<std::string>());
      }
      if (kv.second["stable"]) r.stable = get_str(kv.second["stable"], path + ".stable");
      if (kv.second["sticky"]) {
        const std::string st = get_str(kv.second["sticky"], path + ".sticky");
        if (st == "none") r.sticky = Sticky::kNone;
        else if (st == "key") r.sticky = Sticky::kKey;
        else if (st == "conversation") r.sticky = Sticky::kConversation;
        else fail(path + ".sticky", "expected none, key or conversation, got '" + st + "'");
      }
      if (const YAML::Node k = kv.second["canary"]) {
        const std::string cp = path + ".canary";
        check_keys(k, cp, {"version", "steps", "window_ms", "interval_ms", "min_requests", "thresholds"});
        CanaryConfig& cc = r.canary;
        if (!k["version"]) fail(cp, "a canary needs its version");
        cc.version = get_str(k["version"], cp + ".version");
        if (const YAML::Node st = k["steps"]) {
          if (!st.IsSequence() || st.size() == 0) fail(cp + ".steps", "expected a list of percentages");
          cc.steps.clear();
          for (size_t i = 0; i < st.size(); ++i) {
            const double v = get_double(st[i], cp + ".steps[" + std::to_string(i) + "]");
            if (v <= 0 || v > 100 || (!cc.steps.empty() && v <= cc.steps.back()))
              fail(cp + ".steps[" + std::to_string(i) + "]", "steps rise strictly within (0, 100]");
            cc.steps.push_back(v);
          }
        }
        if (k["window_ms"]) cc.window_ms = get_int(k["window_ms"], cp + ".window_ms", 100, 86400000LL * 7);
        if (k["interval_ms"]) cc.interval_ms = get_int(k["interval_ms"], cp + ".interval_ms", 50, 86400000);
        if (k["min_requests"]) cc.min_requests = get_int(k["min_requests"], cp + ".min_requests", 1, 1 << 30);
        if (const YAML::Node t = k["thresholds"]) {
          const std::string tp = cp + ".thresholds";
          check_keys(t, tp, {"ttft_p99_ratio", "tpot_p99_ratio", "cost_ratio", "error_rate_delta", "timeout_rate_delta",
                             "degradation_rate_delta"});
          auto num = [&](const char* f, double& out) {
            if (!t[f]) return;
            out = get_double(t[f], tp + "." + f);
            if (out < 0) fail(tp + "." + f, "must be >= 0");
          };
          num("ttft_p99_ratio", cc.ttft_p99_ratio);
          num("tpot_p99_ratio", cc.tpot_p99_ratio);
          num("cost_ratio", cc.cost_ratio);
          num("error_rate_delta", cc.error_rate_delta);
          num("timeout_rate_delta", cc.timeout_rate_delta);
          num("degradation_rate_delta", cc.degradation_rate_delta);
        }
      }
      if (const YAML::Node sh = kv.second["shadow"]) {
        check_keys(sh, path + ".shadow", {"version", "fraction"});
        if (!sh["version"]) fail(path + ".shadow", "shadow traffic needs its version");
        r.shadow.version = get_str(sh["version"], path + ".shadow.version");
        if (sh["fraction"]) {
          r.shadow.fraction = get_double(sh["fraction"], path + ".shadow.fraction");
          if (r.shadow.fraction < 0 || r.shadow.fraction > 1) fail(path + ".shadow.fraction", "expected a fraction in [0, 1]");
        }
      }
      c.releases[name] = std::move(r);
    }
  }
  if (const YAML::Node h = root["health"]) {
    check_keys(h, "health", {"interval_ms", "timeout_ms"});
    if (h["interval_ms"]) c.health.interval_ms = get_int(h["interval_ms"], "health.interval_ms", 10, 60000);
    if (h["timeout_ms"]) c.health.timeout_ms = get_int(h["timeout_ms"], "health.timeout_ms", 10, 60000);
  }
  if (const YAML::Node u = root["upstream"]) {
    check_keys(u, "upstream", {"connect_timeout_ms", "head_timeout_ms", "idle_timeout_ms"});
    if (u["connect_timeout_ms"]) c.upstream.connect_timeout_ms = get_int(u["connect_timeout_ms"], "upstream.connect_timeout_ms", 1, 600000);
    if (u["head_timeout_ms"]) c.upstream.head_timeout_ms = get_int(u["head_timeout_ms"], "upstream.head_timeout_ms", 1, 86400000);
    if (u["idle_timeout_ms"]) c.upstream.idle_timeout_ms = get_int(u["idle_timeout_ms"], "upstream.idle_timeout_ms", 1, 86400000);
  }
  if (const YAML::Node sh = root["shadow"]) {
    check_keys(sh, "shadow", {"db", "max_rows", "max_wait_ms", "max_queued", "share_max"});
    if (sh["db"]) c.shadow.db = expand_path(get_str(sh["db"], "shadow.db"), "shadow.db");
    if (sh["max_rows"]) c.shadow.max_rows = get_int(sh["max_rows"], "shadow.max_rows", 1, int64_t(1) << 40);
    if (sh["max_wait_ms"]) c.shadow.max_wait_ms = get_int(sh["max_wait_ms"], "shadow.max_wait_ms", 1, 3600000);
    if (sh["max_queued"]) c.shadow.max_queued = int32_t(get_int(sh["max_queued"], "shadow.max_queued", 1, 1 << 20));
    if (sh["share_max"]) {
      c.shadow.share_max = get_double(sh["share_max"], "shadow.share_max");
      if (c.shadow.share_max <= 0 || c.shadow.share_max > 1) fail("shadow.share_max", "expected a fraction in (0, 1]");
    }
  }
  if (const YAML::Node cc = root["cache"]) {
    check_keys(cc, "cache", {"max_bytes", "ttl_ms", "scope", "backend"});
    if (cc["backend"]) {
      const std::string v = get_str(cc["backend"], "cache.backend");
      if (v != "memory" && v != "redis") fail("cache.backend", "expected memory or redis, got '" + v + "'");
      c.cache.in_redis = v == "redis";
    }
    c.cache.max_bytes = 64 << 20;  // a cache section turns it on
    if (cc["max_bytes"]) c.cache.max_bytes = get_int(cc["max_bytes"], "cache.max_bytes", 0, int64_t(1) << 40);
    if (cc["ttl_ms"]) c.cache.ttl_ms = get_int(cc["ttl_ms"], "cache.ttl_ms", 1, int64_t(86400000) * 30);
    if (cc["scope"]) {
      const std::string v = get_str(cc["scope"], "cache.scope");
      if (v != "key" && v != "shared") fail("cache.scope", "expected key or shared, got '" + v + "'");
      c.cache.shared = v == "shared";
    }
  }
  if (const YAML::Node r = root["redis"]) {
    check_keys(r, "redis", {"host", "port", "timeout_ms", "on_error", "prefix", "lease_ms"});
    if (r["host"]) c.redis.host = get_str(r["host"], "redis.host");
    if (c.redis.host.empty()) fail("redis.host", "empty (leave redis out to keep the limits per replica)");
    if (r["port"]) c.redis.port = int32_t(get_int(r["port"], "redis.port", 1, 65535));
    if (r["timeout_ms"]) c.redis.timeout_ms = get_int(r["timeout_ms"], "redis.timeout_ms", 1, 60000);
    if (r["on_error"]) {
      const std::string v = get_str(r["on_error"], "redis.on_error");
      if (v != "open" && v != "closed") fail("redis.on_error", "expected open or closed, got '" + v + "'");
      c.redis.fail_open = v == "open";
    }
    if (r["prefix"]) c.redis.prefix = get_str(r["prefix"], "redis.prefix");
    if (r["lease_ms"]) c.redis.lease_ms = get_int(r["lease_ms"], "redis.lease_ms", 1000, int64_t(86400000) * 7);
  }
  parse_keys(root, c.keys);
  if (const YAML::Node l = root["limits"]) {
    check_keys(l, "limits", {"max_header_bytes", "max_body_bytes"});
    if (l["max_header_bytes"]) c.limits.max_header_bytes = get_int(l["max_header_bytes"], "limits.max_header_bytes", 1024, 1 << 24);
    if (l["max_body_bytes"]) c.limits.max_body_bytes = get_int(l["max_body_bytes"], "limits.max_body_bytes", 1024, int64_t(1) << 32);
  }
  if (const YAML::Node h = root["http"]) {
    check_keys(h, "http", {"threads", "idle_timeout_ms", "read_timeout_ms", "write_timeout_ms", "max_connections", "queued_notice_ms"});
    if (h["threads"]) c.http.threads = int32_t(get_int(h["threads"], "http.threads", 1, 256));
    if (h["idle_timeout_ms"]) c.http.idle_timeout_ms = get_int(h["idle_timeout_ms"], "http.idle_timeout_ms", 1, kI64 / 1000000);
    if (h["read_timeout_ms"]) c.http.read_timeout_ms = get_int(h["read_timeout_ms"], "http.read_timeout_ms", 1, kI64 / 1000000);
    if (h["write_timeout_ms"]) c.http.write_timeout_ms = get_int(h["write_timeout_ms"], "http.write_timeout_ms", 1, kI64 / 1000000);
    if (h["max_connections"]) c.http.max_connections = get_int(h["max_connections"], "http.max_connections", 0, 1 << 20);
    if (h["queued_notice_ms"]) c.http.queued_notice_ms = get_int(h["queued_notice_ms"], "http.queued_notice_ms", 0, kI64 / 1000000);
  }
  if (const YAML::Node l = root["log"]) {
    check_keys(l, "log", {"format", "access"});
    if (l["format"]) {
      c.log.format = get_str(l["format"], "log.format");
      if (c.log.format != "text" && c.log.format != "json") fail("log.format", "expected text or json");
    }
    if (l["access"]) c.log.access = get_bool(l["access"], "log.access");
  }
  if (root["drain_timeout_ms"]) c.drain_timeout_ms = get_int(root["drain_timeout_ms"], "drain_timeout_ms", 0, kI64 / 1000000);
  if (root["on_unentitled"]) {
    const std::string s = get_str(root["on_unentitled"], "on_unentitled");
    if (s != "downgrade" && s != "reject") fail("on_unentitled", "expected downgrade or reject");
    c.on_unentitled = s == "reject" ? server::OnUnentitled::kReject : server::OnUnentitled::kDowngrade;
  }
  if (root["serve_binary"]) c.serve_binary = get_str(root["serve_binary"], "serve_binary");
}

}  // namespace

std::string_view worker_kind_name(WorkerKind k) { return kind_names[size_t(k)]; }

std::vector<TierConfig> default_tiers() {
  TierConfig fast;
  fast.name = "ultrafast";
  fast.pools = {"dedicated", "shared"};
  fast.share_max = 0.3;
  fast.max_queue_wait_ms = 200;
  fast.on_timeout = OnTimeout::kPromote;
  TierConfig standard;
  standard.name = "standard";
  standard.pools = {"shared"};
  standard.borrow = {"dedicated"};
  standard.share_min = 0.5;
  standard.max_queue_wait_ms = 5000;
  standard.on_timeout = OnTimeout::kReject;
  TierConfig batch;
  batch.name = "batch";
  batch.pools = {"shared"};
  batch.borrow = {"dedicated"};
  batch.share_min = 0.05;
  batch.max_queue_wait_ms = 10 * 60 * 1000;
  batch.on_timeout = OnTimeout::kReject;
  batch.max_queued_requests = 16384;
  return {fast, standard, batch};
}

std::map<std::string, std::string> default_task_patterns() {
  return {
      {"code",
       R"(```|\b(def|class|function|return|import|#include|public static|SELECT|lambda)\b|\b(python|javascript|typescript|c\+\+|rust|golang|java|sql|bash|regex|compile|debug|refactor|stack trace)\b|\bwrite (a |an )?(program|script|function|class|query)\b)"},
      {"math",
       R"(\b(prove|proof|theorem|lemma|integral|derivative|equation|solve for|matrix|eigen\w*|probability|factorial|prime numbers?|calculate|compute)\b|\d+\s*[-+*/^]\s*\d+\s*[-+*/^=]|[=<>]\s*\d+\s*[-+*/^])"},
      {"translation",
       R"(\btranslat\w*\b|\b(in|into|to) (french|german|spanish|italian|chinese|japanese|korean|russian|portuguese|arabic|dutch)\b)"},
  };
}

std::vector<std::string> GatewayConfig::models() const {
  std::vector<std::string> out;
  for (const WorkerConfig& w : workers)
    if (std::find(out.begin(), out.end(), w.model) == out.end()) out.push_back(w.model);
  return out;
}

int GatewayConfig::tier_index(const std::string& name) const {
  for (size_t i = 0; i < tiers.size(); ++i)
    if (tiers[i].name == name) return int(i);
  return -1;
}

Result<GatewayConfig> parse_gateway_config(std::string_view yaml_text, std::string_view origin) {
  GatewayConfig c;
  try {
    parse_root(YAML::Load(std::string(yaml_text)), c);
  } catch (const ConfigParseError& e) {
    return invalid_argument(std::string(origin) + ": " + e.message);
  } catch (const std::exception& e) {
    return invalid_argument(std::string(origin) + ": " + e.what());
  }
  if (c.router.tasks.empty()) {
    c.router.tasks = default_task_patterns();
  } else {
    for (const auto& [k, v] : default_task_patterns()) c.router.tasks.emplace(k, v);
  }
  return c;
}

Result<GatewayConfig> load_gateway_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read gateway config " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_gateway_config(ss.str(), path);
}

Result<HostPort> parse_http_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return invalid_argument("'" + url + "' is not an http:// URL");
  std::string rest = url.substr(scheme.size());
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.find('/') != std::string::npos) return invalid_argument("'" + url + "': a worker URL is http://host:port, without a path");
  const size_t colon = rest.rfind(':');
  HostPort hp;
  hp.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  hp.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') hp.host = hp.host.substr(1, hp.host.size() - 2);
  if (hp.host.empty() || hp.port.empty() || hp.port.size() > 5 || hp.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(hp.port) < 1 || std::stoi(hp.port) > 65535)
    return invalid_argument("'" + url + "': expected http://host:port");
  return hp;
}

// Every release names a served model and versions its workers have; weights finite, not
// negative, summing above zero; the stable version one of them. A model with workers of
// several versions needs its split named.
static Status check_releases(const GatewayConfig& c) {
  std::map<std::string, std::set<std::string>> versions;
  for (const auto& w : c.workers) versions[w.model].insert(w.version);
  for (const auto& [model, r] : c.releases) {
    const std::string p = "models." + model;
    auto it = versions.find(model);
    if (it == versions.end()) return invalid_argument(p + ": no worker serves '" + model + "'");
    if (r.weights.empty()) return invalid_argument(p + ".versions: empty (name each version's weight)");
    if (auto e = check_weights(r.weights, it->second); !e.empty()) return invalid_argument(p + ".versions: " + e);
    for (const auto& v : it->second)
      if (!r.weights.count(v)) return invalid_argument(p + ".versions: the workers' version '" + v + "' has no weight");
    if (!r.stable.empty() && !r.weights.count(r.stable))
      return invalid_argument(p + ".stable: '" + r.stable + "' is not one of its versions");
    if (!r.shadow.version.empty()) {
      if (!r.weights.count(r.shadow.version))
        return invalid_argument(p + ".shadow.version: '" + r.shadow.version + "' is not one of its versions");
      if (c.shadow.db.empty()) return invalid_argument(p + ".shadow: shadow pairs go to a database: name it in shadow.db");
    }
    if (!r.canary.version.empty()) {
      if (!r.weights.count(r.canary.version))
        return invalid_argument(p + ".canary.version: '" + r.canary.version + "' is not one of its versions");
      if (r.stable.empty() || r.stable == r.canary.version)
        return invalid_argument(p + ".canary: a canary is judged against the stable version: name another one in " + p + ".stable");
    }
  }
  for (const auto& [model, vs] : versions)
    if (vs.size() > 1 && !c.releases.count(model))
      return invalid_argument("models." + model + ": its workers have " + std::to_string(vs.size()) +
                              " versions; name the split (models." + model + ".versions)");
  return Status::ok();
}

std::string check_weights(const std::map<std::string, double>& weights, const std::set<std::string>& versions) {
  double sum = 0;
  for (const auto& [v, w] : weights) {
    if (!versions.count(v)) return "unknown version '" + v + "'";
    if (!std::isfinite(w) || w < 0) return "the weight of '" + v + "' must be a finite number >= 0";
    sum += w;
  }
  if (!(sum > 0)) return "the weights must sum to more than 0";
  return "";
}

Status validate(const GatewayConfig& c) {
  if (c.workers.empty()) return invalid_argument("workers: at least one worker");
  std::set<std::string> names, pools;
  for (size_t i = 0; i < c.workers.size(); ++i) {
    const WorkerConfig& w = c.workers[i];
    const std::string p = "workers[" + std::to_string(i) + "]";
    if (w.name.empty() || !names.insert(w.name).second) return invalid_argument(p + ".name: '" + w.name + "' is empty or used twice");
    if (w.model.empty()) return invalid_argument(p + ".model: empty");
    if (w.model == c.router.name) return invalid_argument(p + ".model: '" + w.model + "' is the router's name");
    if (w.pool.empty()) return invalid_argument(p + ".pool: empty");
    pools.insert(w.pool);
    if (w.kind == WorkerKind::kLocal) {
      if (w.path.empty()) return invalid_argument(p + ".path: a local worker needs its model file");
      if (!w.url.empty()) return invalid_argument(p + ".url: a local worker gets its address when it starts");
    } else {
      if (w.url.empty()) return invalid_argument(p + ".url: a " + std::string(worker_kind_name(w.kind)) + " worker needs its URL");
      if (auto u = parse_http_url(w.url); !u.is_ok()) return invalid_argument(p + ".url: " + u.status().message());
      if (!w.path.empty()) return invalid_argument(p + ".path: only local workers have a model file here");
    }
  }
  const std::vector<std::string> models = c.models();
  auto is_model = [&](const std::string& m) { return std::find(models.begin(), models.end(), m) != models.end(); };
  if (c.tiers.empty()) return invalid_argument("tiers: at least one tier");
  std::set<std::string> tiers;
  double floors = 0;
  for (size_t i = 0; i < c.tiers.size(); ++i) {
    const TierConfig& t = c.tiers[i];
    const std::string p = "tiers[" + std::to_string(i) + "]";
    if (t.name.empty() || !tiers.insert(t.name).second) return invalid_argument(p + ".name: '" + t.name + "' is empty or used twice");
    if (t.pools.empty()) return invalid_argument(p + ".pools: a tier needs at least one pool");
    bool any = false;
    for (const auto& pool : t.pools) any = any || pools.count(pool);
    if (!any) return invalid_argument(p + ".pools: no worker is in any of them");
    for (const auto* list : {&t.pools, &t.borrow})
      for (const auto& pool : *list)
        if (!pools.count(pool) && pool != "dedicated" && pool != "shared")
          return invalid_argument(p + ": unknown pool '" + pool + "' (no worker is in it)");
    if (!(t.share_min >= 0 && t.share_min <= 1 && t.share_max > 0 && t.share_max <= 1 && t.share_min <= t.share_max))
      return invalid_argument(p + ": 0 <= share_min <= share_max <= 1, share_max > 0");
    floors += t.share_min;
  }
  if (floors > 1 + 1e-9) return invalid_argument("tiers: the share_min values add up to more than 1");
  for (const TierConfig& t : c.tiers)
    if (t.on_timeout == OnTimeout::kDowngrade) {
      const int to = c.tier_index(t.downgrade_to);
      if (to < 0) return invalid_argument("tiers." + t.name + ".on_timeout: no tier named '" + t.downgrade_to + "'");
      if (to <= c.tier_index(t.name)) return invalid_argument("tiers." + t.name + ".on_timeout: downgrade to a later tier");
    }
  for (const auto& [alias, tier] : c.tier_aliases)
    if (!tiers.count(tier)) return invalid_argument("tier_aliases." + alias + ": '" + tier + "' is not a configured tier");
  if (!tiers.count(c.default_tier)) return invalid_argument("default_tier '" + c.default_tier + "' is not a configured tier");
  if (auto st = check_releases(c); !st.is_ok()) return st;
  if (auto st = server::check_request_priorities(c.request_priorities, std::vector<std::string>(tiers.begin(), tiers.end()),
                                                 "request_priorities");
      !st.is_ok())
    return st;
  const RouterConfig& r = c.router;
  if (r.name.empty()) return invalid_argument("router.name: empty");
  for (size_t i = 0; i < r.rules.size(); ++i) {
    const RouteRule& rule = r.rules[i];
    const std::string p = "router.rules[" + std::to_string(i) + "]";
    if (!is_model(rule.target)) return invalid_argument(p + ".target: no worker serves '" + rule.target + "'");
    if (rule.min_prompt_tokens >= 0 && rule.max_prompt_tokens >= 0 && rule.min_prompt_tokens > rule.max_prompt_tokens)
      return invalid_argument(p + ": min_prompt_tokens > max_prompt_tokens: the rule can never match");
    for (const auto& t : rule.tasks)
      if (!r.tasks.count(t)) return invalid_argument(p + ".task: unknown task '" + t + "' (define it under router.tasks)");
    for (const auto& t : rule.tiers)
      if (!tiers.count(t)) return invalid_argument(p + ".tier: '" + t + "' is not a configured tier");
    for (size_t j = 0; j < i; ++j) {
      const RouteRule& e = r.rules[j];
      if (e.min_prompt_tokens < 0 && e.max_prompt_tokens < 0 && e.endpoint.empty() && e.tasks.empty() && e.tiers.empty())
        return invalid_argument(p + ": can never match (rule '" + e.name + "' before it matches every request)");
    }
  }
  if (!r.default_target.empty() && !is_model(r.default_target))
    return invalid_argument("router.default: no worker serves '" + r.default_target + "'");
  if (!r.classifier.path.empty()) {
    if (r.classifier.labels.empty()) return invalid_argument("router.classifier.labels: map the classifier's labels to models");
    for (const auto& [label, model] : r.classifier.labels)
      if (!is_model(model)) return invalid_argument("router.classifier.labels." + label + ": no worker serves '" + model + "'");
    if (!(r.classifier.threshold >= 0 && r.classifier.threshold <= 1))
      return invalid_argument("router.classifier.threshold: expected 0..1");
  }
  for (const auto& [from, to] : r.fallback)
    if (!is_model(from) || !is_model(to) || from == to)
      return invalid_argument("router.fallback." + from + ": both models must be served, and differ");
  if (c.cache.in_redis && c.redis.host.empty())
    return invalid_argument("cache.backend: redis needs the redis section (host, port)");
  std::set<std::string> hashes;
  for (size_t i = 0; i < c.keys.size(); ++i) {
    const server::KeyConfig& k = c.keys[i];
    const std::string p = "keys[" + std::to_string(i) + "]";
    if (k.sha256.size() != 64 || k.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
      return invalid_argument(p + ".sha256: expected 64 lowercase hex digits (tierserve serve --hash-key KEY)");
    if (!hashes.insert(k.sha256).second) return invalid_argument(p + ".sha256: the same key is listed twice");
    for (const auto& t : k.tiers)
      if (!tiers.count(t)) return invalid_argument(p + ".tiers: '" + t + "' is not a configured tier");
    if (!k.default_tier.empty() && !tiers.count(k.default_tier))
      return invalid_argument(p + ".default_tier: '" + k.default_tier + "' is not a configured tier");
  }
  if (c.listen.port < 0 || c.listen.port > 65535) return invalid_argument("listen.port out of range");
  if (c.http.threads < 1) return invalid_argument("http.threads must be >= 1");
  return Status::ok();
}

}  // namespace ts::gateway
