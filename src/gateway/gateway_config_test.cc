// The gateway's config: a full file, the defaults, and every kind of bad input the issue
// names (unknown pool, model, worker kind; a duplicate; a rule that cannot match; a worker
// URL that is not HTTP), each an error that names its field.
#include "gateway/config.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace ts::gateway {
namespace {

const char* kFull = R"(
listen: {host: 127.0.0.1, port: 0}
workers:
  - {name: chat, kind: local, model: smollm2, path: /models/smol.gguf, threads: 1, pool: dedicated}
  - {name: chat2, kind: local, model: smollm2, path: /models/smol.gguf, pool: shared, max_inflight: 8}
  - {name: big, kind: tierserve, model: gemma3, url: "http://127.0.0.1:9001", pool: shared}
  - {name: peer, kind: llama.cpp, model: qwen, url: "http://10.0.0.2:8080/", upstream_model: qwen2.5, pool: shared}
  - {name: gpu, kind: vllm, model: llama, url: "http://gpu:8000", api_key: sk-x}
tiers:
  - {name: ultrafast, max_queue_wait_ms: 100}
  - {name: standard}
  - {name: batch, on_timeout: reject}
router:
  name: auto
  rules:
    - {name: code, task: code, target: gemma3}
    - {name: long, min_prompt_tokens: 300, target: gemma3}
    - {name: fast, tier: [ultrafast], max_prompt_tokens: 64, endpoint: chat, target: smollm2}
  default: smollm2
  on_saturated: fallback
  fallback: {smollm2: gemma3}
health: {interval_ms: 100, timeout_ms: 300}
keys:
  - {name: k, sha256: 0000000000000000000000000000000000000000000000000000000000000000}
)";

TEST(GatewayConfig, FullFileAndDefaults) {
  auto c = parse_gateway_config(kFull);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(validate(*c).is_ok()) << validate(*c).to_string();
  ASSERT_EQ(c->workers.size(), 5u);
  EXPECT_EQ(c->workers[0].kind, WorkerKind::kLocal);
  EXPECT_EQ(c->workers[0].max_inflight, 16);  // tierserve's default
  EXPECT_EQ(c->workers[1].max_inflight, 8);
  EXPECT_EQ(c->workers[3].kind, WorkerKind::kLlamaCpp);
  EXPECT_EQ(c->workers[3].max_inflight, 4);
  EXPECT_EQ(c->workers[3].served_as(), "qwen2.5");
  EXPECT_FALSE(c->workers[3].honours_priority());
  EXPECT_EQ(c->workers[4].pool, "shared");
  EXPECT_EQ(c->models(), (std::vector<std::string>{"smollm2", "gemma3", "qwen", "llama"}));
  // A tier named like a default starts from it.
  EXPECT_EQ(c->tiers[0].pools, (std::vector<std::string>{"dedicated", "shared"}));
  EXPECT_EQ(c->tiers[0].max_queue_wait_ms, 100);
  EXPECT_DOUBLE_EQ(c->tiers[1].share_min, 0.5);
  EXPECT_EQ(c->router.rules.size(), 3u);
  EXPECT_EQ(c->router.rules[2].tiers, (std::vector<std::string>{"ultrafast"}));
  EXPECT_TRUE(c->router.fallback_when_saturated);
  EXPECT_EQ(c->router.tasks.count("code"), 1u);  // the built-in patterns
  // Paths take ~/ and ${VAR} (the shipped config's model directory and classifier).
  ::setenv("TS_GW_TEST_DIR", "/srv/m", 1);
  auto e = parse_gateway_config(
      "workers:\n  - {name: a, kind: local, model: m, path: '${TS_GW_TEST_DIR}/a.gguf'}\n"
      "router:\n  classifier: {path: '${TS_GW_TEST_DIR}/c.json', labels: {x: m}}\n");
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->workers[0].path, "/srv/m/a.gguf");
  EXPECT_EQ(e->router.classifier.path, "/srv/m/c.json");
  auto unset = parse_gateway_config("workers:\n  - {name: a, kind: local, model: m, path: '${TS_GW_TEST_UNSET}/a'}\n");
  ASSERT_FALSE(unset.is_ok());
  EXPECT_NE(unset.status().message().find("workers[0].path"), std::string::npos) << unset.status().message();
  // Shared limits in Redis.
  auto rc = parse_gateway_config("workers:\n  - {name: a, kind: local, model: m, path: /a.gguf}\n"
                                 "redis: {host: 10.0.0.9, port: 6380, timeout_ms: 20, on_error: open, lease_ms: 60000}\n");
  ASSERT_TRUE(rc.is_ok()) << rc.status().to_string();
  EXPECT_EQ(rc->redis.host, "10.0.0.9");
  EXPECT_EQ(rc->redis.port, 6380);
  EXPECT_EQ(rc->redis.timeout_ms, 20);
  EXPECT_TRUE(rc->redis.fail_open);
  EXPECT_EQ(rc->redis.lease_ms, 60000);
  auto cc = parse_gateway_config("workers:\n  - {name: a, kind: local, model: m, path: /a.gguf}\ncache: {ttl_ms: 1000, scope: shared}\n");
  ASSERT_TRUE(cc.is_ok()) << cc.status().to_string();
  EXPECT_EQ(cc->cache.max_bytes, 64 << 20);  // a cache section turns it on
  EXPECT_EQ(cc->cache.ttl_ms, 1000);
  EXPECT_TRUE(cc->cache.shared);
  EXPECT_EQ(c->cache.max_bytes, 0);  // off without one
  EXPECT_TRUE(c->redis.host.empty());  // off unless configured
  EXPECT_FALSE(c->redis.fail_open);    // fail closed by default
  auto hp = parse_http_url("http://10.0.0.2:8080/");
  ASSERT_TRUE(hp.is_ok());
  EXPECT_EQ(hp->host, "10.0.0.2");
  EXPECT_EQ(hp->port, "8080");
}

std::string error_of(const std::string& yaml) {
  auto c = parse_gateway_config(yaml);
  if (!c.is_ok()) return c.status().message();
  const Status st = validate(*c);
  return st.is_ok() ? "(valid)" : st.message();
}

TEST(GatewayConfig, BadInputNamesTheField) {
  const std::string w = "workers:\n  - {name: a, kind: local, model: m, path: /x.gguf}\n";
  struct Case {
    std::string yaml, want;
  } cases[] = {
      {"workers:\n  - {name: a, kind: docker, model: m, url: 'http://h:1'}\n", "workers[0].kind"},
      {w + "redis: {host: h, on_error: maybe}\n", "redis.on_error"},
      {w + "cache: {scope: everyone}\n", "cache.scope"},
      {w + "cache: {backend: redis}\n", "cache.backend: redis needs the redis section"},
      {w + "cache: {backend: disk}\n", "cache.backend"},
      {w + "cache: {ttl_ms: 0}\n", "cache.ttl_ms"},
      {w + "redis: {host: h, port: 0}\n", "redis.port"},
      {w + "redis: {host: ''}\n", "redis.host"},
      {w + "redis: {host: h, pasword: x}\n", "redis.pasword: unknown key"},
      {"workers:\n  - {name: a, kind: tierserve, model: m, url: 'https://h:1'}\n", "workers[0].url"},
      {"workers:\n  - {name: a, kind: tierserve, model: m, url: 'ftp://h'}\n", "not an http:// URL"},
      {"workers:\n  - {name: a, kind: tierserve, model: m, url: 'http://h:99999'}\n", "workers[0].url"},
      {"workers:\n  - {name: a, kind: tierserve, model: m}\n", "needs its URL"},
      {"workers:\n  - {name: a, kind: local, model: m}\n", "workers[0].path"},
      {w + "  - {name: a, kind: local, model: n, path: /y.gguf}\n", "workers[1].name"},
      {w + "tiers:\n  - {name: ultrafast, pools: [gold]}\n", "no worker is in any of them"},
      {w + "tiers:\n  - {name: standard, pools: [shared, gold]}\n", "unknown pool 'gold'"},
      {w + "router:\n  rules:\n    - {target: nope}\n", "router.rules[0].target"},
      {w + "router:\n  rules:\n    - {min_prompt_tokens: 10, max_prompt_tokens: 5, target: m}\n", "can never match"},
      {w + "router:\n  rules:\n    - {name: all, target: m}\n    - {name: later, task: code, target: m}\n", "router.rules[1]: can never match"},
      {w + "router:\n  rules:\n    - {task: poetry, target: m}\n", "unknown task 'poetry'"},
      {w + "router:\n  rules:\n    - {tier: gold, target: m}\n", "router.rules[0].tier"},
      {w + "router:\n  name: m\n", "the router's name"},
      {w + "router:\n  default: other\n", "router.default"},
      {w + "router:\n  classifier: {path: /c.json}\n", "router.classifier.labels"},
      {w + "router:\n  fallback: {m: m}\n", "router.fallback.m"},
      {w + "tiers:\n  - {name: standard, on_timeout: 'downgrade:gold'}\n", "no tier named 'gold'"},
      {w + "tier_aliases: {priority: gold}\n", "tier_aliases.priority"},
      {w + "default_tier: gold\n", "default_tier"},
      {w + "surprise: 1\n", "surprise: unknown key"},
      {w + "health: {interval_ms: 1}\n", "health.interval_ms"},
      {w + "keys:\n  - {sha256: abc}\n", "keys[0].sha256"},
      {"workers: []\n", "at least one worker"},
      {"workers:\n  - {name: a, kind: local, model: m, path: /x.gguf, colour: red}\n", "workers[0].colour"},
  };
  for (const auto& c : cases) {
    const std::string m = error_of(c.yaml);
    EXPECT_NE(m.find(c.want), std::string::npos) << "config:\n" << c.yaml << "error: " << m << "\nwanted: " << c.want;
  }
  EXPECT_EQ(error_of(w), "(valid)");
}

}  // namespace
}  // namespace ts::gateway
