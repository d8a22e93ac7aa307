#include "server/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "server/sha256.h"

namespace ts::server {
namespace {

TEST(ServerConfig, EmptyFileIsAllDefaults) {
  auto c = parse_config("");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->listen.port, 8080);
  EXPECT_EQ(c->admin.port, -1);
  ASSERT_EQ(c->sched.tiers.size(), 3u);
  EXPECT_EQ(c->sched.tiers[0].name, "ultrafast");
  EXPECT_EQ(c->default_tier, "standard");
  EXPECT_EQ(c->tier_aliases.at("priority"), "ultrafast");
  EXPECT_EQ(c->tier_aliases.at("flex"), "batch");
  EXPECT_EQ(c->http.max_connections, 1024);
  EXPECT_TRUE(validate(*c).is_ok());
}

TEST(ServerConfig, TheShippedDefaultFileParsesAndValidates) {
  auto c = load_config(std::string(TS_SOURCE_DIR) + "/config/tierserve.yaml");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(validate(*c).is_ok()) << validate(*c).to_string();
  EXPECT_TRUE(c->keys.empty());
  EXPECT_EQ(c->http.max_connections, ServerConfig{}.http.max_connections);
  ASSERT_EQ(c->sched.tiers.size(), 3u);
  // The shipped file is the server's defaults: the scheduler's, with the step budget and
  // the latency tier's burst left to the machine ("auto").
  const auto def = server_default_sched();
  EXPECT_EQ(c->sched.step_token_budget, 0);
  EXPECT_EQ(def.step_token_budget, 0);
  EXPECT_EQ(def.tiers[0].burst_tokens, -1);
  EXPECT_EQ(c->sched.tiers[0].on_predicted_wait, def.tiers[0].on_predicted_wait);
  EXPECT_EQ(def.tiers[0].on_predicted_wait.target, "standard");
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c->sched.tiers[i].name, def.tiers[i].name);
    EXPECT_EQ(c->sched.tiers[i].share_min, def.tiers[i].share_min);
    EXPECT_EQ(c->sched.tiers[i].share_max, def.tiers[i].share_max);
    EXPECT_EQ(c->sched.tiers[i].max_queue_wait_ms, def.tiers[i].max_queue_wait_ms);
    EXPECT_EQ(c->sched.tiers[i].on_timeout, def.tiers[i].on_timeout);
    EXPECT_EQ(c->sched.tiers[i].speculative, def.tiers[i].speculative);
    EXPECT_EQ(c->sched.tiers[i].interrupt, def.tiers[i].interrupt);
    EXPECT_EQ(c->sched.tiers[i].burst_tokens, def.tiers[i].burst_tokens);
    EXPECT_EQ(c->sched.tiers[i].max_batch, def.tiers[i].max_batch);
  }
  EXPECT_EQ(c->speculative.max_drafts, ServerConfig{}.speculative.max_drafts);
  EXPECT_EQ(c->speculative.max_ngram, ServerConfig{}.speculative.max_ngram);
}

// model.map_pack's name from before pack files were called so is still read.
TEST(ServerConfig, MapPlanIsTheOldNameOfMapPack) {
  auto c = parse_config("model: {path: /m.gguf, map_plan: true}\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(c->model.map_pack);
  c = parse_config("model: {path: /m.gguf, map_plan: true, map_pack: false}\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_FALSE(c->model.map_pack);
}

TEST(ServerConfig, FullFile) {
  const std::string hash = sha256_hex("sk-test");
  const std::string y = R"(
listen: {host: 0.0.0.0, port: 0}
admin: {host: 127.0.0.1, port: 9090}
model: {path: /m.gguf, threads: 3, flash_attn: false, map_pack: true}
engine: {kv_bytes: 1048576, block_size: 32, max_seq_len: 256, max_step_tokens: 128, prefix_cache: off}
scheduling: fifo
scheduler: {step_token_budget: 64, max_queued_requests_total: 10}
tiers:
  - name: fast
    priority: 0
    share_max: 0.4
    borrow: true
    max_queue_wait_ms: 100
    on_timeout: downgrade:slow
  - {name: slow, priority: 1, share_min: 0.5, max_queued_requests: 2, queue: shortest_prompt_first}
tier_aliases: {priority: fast, default: slow, flex: slow}
request_priorities: {fast: 10, slow: -5}
default_tier: slow
limits: {max_body_bytes: 1000, max_tokens_cap: 64}
http: {threads: 3, max_connections: 7}
drain_timeout_ms: 500
on_unentitled: reject
keys:
  - {name: a, sha256: )" + hash + R"(, tiers: [slow], requests_per_min: 5, tokens_per_min: 100, max_concurrent: 1}
)";
  auto c = parse_config(y);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(validate(*c).is_ok()) << validate(*c).to_string();
  EXPECT_EQ(c->listen.host, "0.0.0.0");
  EXPECT_EQ(c->listen.port, 0);
  EXPECT_EQ(c->admin.port, 9090);
  EXPECT_EQ(c->model.path, "/m.gguf");
  EXPECT_EQ(c->model.flash_attn, "off");
  EXPECT_TRUE(c->model.map_pack);
  EXPECT_EQ(c->engine.kv_bytes, 1048576u);
  EXPECT_FALSE(c->engine.prefix_cache);
  EXPECT_TRUE(c->fifo);
  EXPECT_EQ(c->sched.step_token_budget, 64);
  ASSERT_EQ(c->sched.tiers.size(), 2u);
  EXPECT_EQ(c->sched.tiers[0].on_timeout.action, sched::TimeoutAction::kDowngrade);
  EXPECT_EQ(c->sched.tiers[0].on_timeout.target, "slow");
  EXPECT_EQ(c->sched.tiers[1].queue, sched::QueueKind::kShortestPromptFirst);
  EXPECT_EQ(c->request_priorities, (RequestPriorities{{"fast", 10}, {"slow", -5}}));
  EXPECT_EQ(c->limits.max_body_bytes, 1000);
  EXPECT_EQ(c->http.threads, 3);
  EXPECT_EQ(c->http.max_connections, 7);
  EXPECT_EQ(c->on_unentitled, OnUnentitled::kReject);
  ASSERT_EQ(c->keys.size(), 1u);
  EXPECT_EQ(c->keys[0].sha256, hash);
  EXPECT_EQ(c->keys[0].max_concurrent, 1);
  // Round trip through to_yaml.
  auto again = parse_config(to_yaml(*c));
  ASSERT_TRUE(again.is_ok()) << again.status().to_string() << "\n" << to_yaml(*c);
  EXPECT_EQ(to_yaml(*again), to_yaml(*c));
  EXPECT_NE(to_yaml(*c).find("max_connections: 7"), std::string::npos) << to_yaml(*c);
  // The attention numerics: tiled, or true/false for llama.cpp's flash rounding on/off.
  for (auto [yaml, want] : {std::pair{"model: {flash_attn: tiled}", "tiled"}, std::pair{"model: {flash_attn: true}", "on"},
                            std::pair{"{}", "on"}}) {
    auto m = parse_config(yaml);
    ASSERT_TRUE(m.is_ok()) << yaml;
    EXPECT_EQ(m->model.flash_attn, want) << yaml;
    EXPECT_EQ(parse_config(to_yaml(*m))->model.flash_attn, want) << yaml;
  }
  // 0: unlimited.
  auto unlimited = parse_config("http: {max_connections: 0}");
  ASSERT_TRUE(unlimited.is_ok());
  EXPECT_EQ(unlimited->http.max_connections, 0);
  EXPECT_TRUE(validate(*unlimited).is_ok());
}

TEST(ServerConfig, ATierNamedLikeADefaultStartsFromIt) {
  auto c = parse_config("tiers:\n  - {name: ultrafast, max_queued_requests: 3}\n  - {name: standard}\n  - {name: batch}\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->sched.tiers[0].max_queued_requests, 3);
  EXPECT_EQ(c->sched.tiers[0].max_queue_wait_ms, 200);  // from the default ultrafast
  EXPECT_TRUE(c->sched.tiers[0].borrow);
}

struct Bad {
  const char* yaml;
  const char* needle;  // must appear in the message
};

TEST(ServerConfig, BadFilesNameTheProblem) {
  const Bad cases[] = {
      {"listen: [1, 2", "error at line 1"},                               // YAML syntax
      {"lisen: {port: 1}", "lisen: unknown key"},                         // typo
      {"listen: {port: 70000}", "listen.port"},                           // range
      {"listen: {port: abc}", "expected an integer"},
      {"tiers: {name: x}", "tiers: expected a list"},
      {"tiers:\n  - {priority: 1}", "a tier needs a name"},
      {"tiers:\n  - {name: a, share_min: lots}", "tiers[0].share_min"},
      {"tiers:\n  - {name: a, on_timeout: explode}", "on_timeout"},
      {"tiers:\n  - {name: a, colour: red}", "unknown tier field"},
      {"scheduling: lottery", "expected tiered or fifo"},
      {"on_unentitled: shrug", "expected downgrade or reject"},
      {"keys:\n  - {name: a}", "needs sha256"},
      {"keys:\n  - {name: a, sha256: x, extra: 1}", "keys[0].extra"},
      {"model: {threads: -1}", "model.threads"},
      {"model: {flash_attn: fast}", "expected true, false or tiled"},
      {"engine: {prefix_cache: maybe}", "expected true or false"},
      {"limits: {max_body_bytes: 1.5}", "expected an integer"},
      {"http: {max_connections: -1}", "http.max_connections"},
      {"http: {max_conections: 5}", "http.max_conections: unknown key"},
      {"speculative: {max_drafts: 65}", "speculative.max_drafts"},
      {"speculative: {drafts: 2}", "speculative.drafts: unknown key"},
      {"model: {sampling: {temperature: 3}}", "model.sampling.temperature: expected a value in [0, 2]"},
      {"model: {sampling: {top_p: hot}}", "model.sampling.top_p"},
      {"model: {sampling: {tempo: 1}}", "model.sampling.tempo: unknown key"},
  };
  for (const Bad& b : cases) {
    auto c = parse_config(b.yaml, "test.yaml");
    ASSERT_FALSE(c.is_ok()) << b.yaml;
    EXPECT_NE(c.status().message().find(b.needle), std::string::npos) << b.yaml << " -> " << c.status().message();
    EXPECT_NE(c.status().message().find("test.yaml"), std::string::npos);
  }
}

TEST(ServerConfig, ValidateCatchesCrossFieldErrors) {
  const std::string h = sha256_hex("k");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tiers:\n  - {name: a, share_min: 0.8}\n  - {name: b, share_min: 0.8}\ndefault_tier: a\ntier_aliases: {}",
       "share_min_sum_above_one"},
      {"default_tier: gold", "default_tier 'gold'"},
      {"tier_aliases: {priority: gold}", "tier_aliases.priority"},
      {"request_priorities: {gold: 1}", "request_priorities.gold"},
      {"request_priorities: {ultrafast: 0, standard: 0}", "given to two tiers"},
      {"keys:\n  - {sha256: abc}", "64 lowercase hex"},
      {"keys:\n  - {sha256: " + h + ", tiers: [gold]}", "'gold' is not a configured tier"},
      {"keys:\n  - {sha256: " + h + ", tiers: [batch], default_tier: standard}", "not among the key's tiers"},
      {"keys:\n  - {sha256: " + h + "}\n  - {sha256: " + h + "}", "listed twice"},
      {"admin: {port: 8080}", "same address"},
      {"speculative: {max_ngram: 2, min_ngram: 3}", "min_ngram <= max_ngram"},
  };
  for (const auto& [yaml, needle] : cases) {
    auto c = parse_config(yaml);
    ASSERT_TRUE(c.is_ok()) << yaml << c.status().to_string();
    const Status st = validate(*c);
    EXPECT_FALSE(st.is_ok()) << yaml;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  }
}

TEST(ServerConfig, TierOverrides) {
  ServerConfig c;
  ASSERT_TRUE(apply_tier_override(c, "standard.max_queued_requests=4").is_ok());
  EXPECT_EQ(c.sched.tiers[1].max_queued_requests, 4);
  ASSERT_TRUE(apply_tier_override(c, "ultrafast.on_timeout=downgrade:standard").is_ok());
  EXPECT_EQ(c.sched.tiers[0].on_timeout.target, "standard");
  ASSERT_TRUE(apply_tier_override(c, "batch.borrow=true").is_ok());
  EXPECT_TRUE(c.sched.tiers[2].borrow);
  EXPECT_FALSE(apply_tier_override(c, "gold.priority=1").is_ok());
  EXPECT_FALSE(apply_tier_override(c, "standard.bogus=1").is_ok());
  EXPECT_FALSE(apply_tier_override(c, "standard.max_batch=0").is_ok());
  EXPECT_FALSE(apply_tier_override(c, "nonsense").is_ok());
}

// Key hashes from a file of their own (a Kubernetes Secret), after the config's own.
TEST(ServerConfig, KeysFileAddsKeys) {
  const std::string dir = std::string(TS_BINARY_DIR);
  const std::string a = sha256_hex("a"), b = sha256_hex("b");
  {
    std::ofstream(dir + "/keys_file_test.yaml") << "keys:\n  - {name: b, sha256: " << b << ", tiers: [batch]}\n";
    std::ofstream(dir + "/keys_file_bad.yaml") << "keys: {name: x}\n";
    std::ofstream(dir + "/keys_file_extra.yaml") << "listen: {port: 1}\n";
  }
  auto c = parse_config("keys:\n  - {name: a, sha256: " + a + "}\nkeys_file: " + dir + "/keys_file_test.yaml\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  ASSERT_EQ(c->keys.size(), 2u);
  EXPECT_EQ(c->keys[0].name, "a");
  EXPECT_EQ(c->keys[1].name, "b");
  EXPECT_EQ(c->keys[1].tiers, std::vector<std::string>{"batch"});
  EXPECT_TRUE(validate(*c).is_ok()) << validate(*c).to_string();
  // `keys:` left empty is no keys, and the rest of the file is still read.
  c = parse_config("keys:\nlog: {format: json}\n");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(c->keys.empty());
  EXPECT_EQ(c->log.format, "json");
  for (const auto& [file, needle] : std::vector<std::pair<std::string, std::string>>{
           {"/nonexistent/keys.yaml", "cannot read"},
           {dir + "/keys_file_bad.yaml", "expected a list of keys"},
           {dir + "/keys_file_extra.yaml", "unknown key"}}) {
    auto e = parse_config("keys_file: " + file + "\n");
    ASSERT_FALSE(e.is_ok()) << file;
    EXPECT_NE(e.status().message().find("keys_file"), std::string::npos) << e.status().message();
    EXPECT_NE(e.status().message().find(needle), std::string::npos) << e.status().message();
  }
}

TEST(ServerConfig, MissingFileIsNotFound) {
  auto c = load_config("/nonexistent/tierserve.yaml");
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ts::server

namespace ts::server {
namespace {

// Every key from --set and the environment; command line > environment > file > default.
TEST(ServerConfigLayers, SetAndEnvironmentOverrideTheFile) {
  const std::string path = std::string(TS_BINARY_DIR) + "/config_layers_test.yaml";
  {
    std::ofstream(path) << "scheduler: {step_token_budget: 32}\ndrain_timeout_ms: 1000\nhttp: {threads: 3}\n";
  }
  const char* env[] = {"TIERSERVE_SCHEDULER__STEP_TOKEN_BUDGET=128", "TIERSERVE_DRAIN_TIMEOUT_MS=2000",
                       "TIERSERVE_TIERS__STANDARD__SHARE_MIN=0.4", "TIERSERVE_MODEL=/not/a/config/key.gguf",
                       "TIERSERVE_ISA=avx2", "PATH=/bin", nullptr};
  const auto from_env = env_overrides(env);
  ASSERT_EQ(from_env.size(), 3u);  // TIERSERVE_MODEL and TIERSERVE_ISA are not config keys
  auto c = load_layered_config(path, from_env, {});
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->sched.step_token_budget, 128);  // environment over the file
  EXPECT_EQ(c->drain_timeout_ms, 2000);
  EXPECT_EQ(c->http.threads, 3);               // the file
  EXPECT_DOUBLE_EQ(c->sched.tiers[1].share_min, 0.4);
  std::vector<ConfigOverride> sets = {*parse_set("scheduler.step_token_budget=auto"), *parse_set("log.format=json"),
                                      *parse_set("model.served_name=[a, b]"), *parse_set("tiers.ultrafast.max_queue_wait_ms=50"),
                                      *parse_set("model.system_prompt=You are a helpful assistant."),
                                      *parse_set("model.sampling.temperature=0.2")};
  c = load_layered_config(path, from_env, sets);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->sched.step_token_budget, 0);     // the command line over the environment ("auto")
  EXPECT_EQ(c->log.format, "json");
  EXPECT_EQ(c->model.served_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c->sched.tiers[0].max_queue_wait_ms, 50);
  EXPECT_EQ(c->model.system_prompt, "You are a helpful assistant.");
  EXPECT_DOUBLE_EQ(c->model.sampling.temperature, 0.2);
  EXPECT_DOUBLE_EQ(c->model.sampling.top_p, 1.0);
  // --print-config shows the result: it round-trips.
  auto again = parse_config(to_yaml(*c));
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->model.served_names, c->model.served_names);
  EXPECT_EQ(again->log.format, "json");
  EXPECT_DOUBLE_EQ(again->model.sampling.temperature, 0.2);
  EXPECT_EQ(again->model.system_prompt, c->model.system_prompt);
}

// A Kubernetes Secret mounted as a file names it through the environment too.
TEST(ServerConfigLayers, KeysFileFromTheEnvironment) {
  const char* env[] = {"TIERSERVE_KEYS_FILE=/run/secrets/keys.yaml", nullptr};
  const auto from_env = env_overrides(env);
  ASSERT_EQ(from_env.size(), 1u);
  EXPECT_EQ(from_env[0].path, "keys_file");
  EXPECT_EQ(from_env[0].value, "/run/secrets/keys.yaml");
}

TEST(ServerConfigLayers, BadKeysAndValuesNameWhereTheyCameFrom) {
  auto bad = [](std::vector<ConfigOverride> env, std::vector<ConfigOverride> sets) {
    auto c = load_layered_config("", env, sets);
    return c.is_ok() ? std::string("(accepted)") : c.status().message();
  };
  std::string m = bad({}, {*parse_set("scheduler.no_such_key=1")});
  EXPECT_NE(m.find("--set scheduler.no_such_key"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown key"), std::string::npos) << m;
  m = bad({}, {*parse_set("scheduler.step_token_budget=lots")});
  EXPECT_NE(m.find("--set scheduler.step_token_budget"), std::string::npos) << m;
  const char* e1[] = {"TIERSERVE_HTTP__THREADS=-3", nullptr};
  m = bad(env_overrides(e1), {});
  EXPECT_NE(m.find("TIERSERVE_HTTP__THREADS (environment)"), std::string::npos) << m;
  const char* e2[] = {"TIERSERVE_NOPE__X=1", nullptr};
  m = bad(env_overrides(e2), {});
  EXPECT_NE(m.find("TIERSERVE_NOPE__X"), std::string::npos) << m;
  m = bad({}, {*parse_set("tiers.gold.share_max=0.5")});
  EXPECT_NE(m.find("no tier named 'gold'"), std::string::npos) << m;
  m = bad({}, {*parse_set("limits.max_body_bytes.deeper=1")});
  EXPECT_NE(m.find("--set limits.max_body_bytes.deeper"), std::string::npos) << m;
  EXPECT_NE(m.find("expected a scalar"), std::string::npos) << m;
  m = bad({}, {*parse_set("limits=3")});
  EXPECT_NE(m.find("--set limits"), std::string::npos) << m;
  EXPECT_FALSE(parse_set("noequals").is_ok());
  EXPECT_FALSE(parse_set("=1").is_ok());
  EXPECT_FALSE(parse_set("Upper.case=1").is_ok());
  EXPECT_FALSE(parse_set("a..b=1").is_ok());
  // A served name goes into bodies, logs and metric labels: no quotes, spaces or controls.
  for (const char* name : {"has space", "quo\"te", "back\\slash", "tab\there"}) {
    auto c = load_layered_config("", {}, {});
    ASSERT_TRUE(c.is_ok());
    c->model.served_names = {"fine", name};
    EXPECT_FALSE(validate(*c).is_ok()) << name;
  }
}

}  // namespace
}  // namespace ts::server
