// The server's configuration: one YAML file (config/tierserve.yaml is the default), every
// field with a default, so an empty file is a valid config. Unknown keys are errors (a
// typo must not silently fall back to a default). The command line overrides fields after
// the file is read (tools/cmd_serve.cc); validate() then checks the whole.
//
//   listen: {host, port}             admin: {host, port}  (port -1: no separate listener)
//   model: {path, threads, flash_attn, map_pack}
//   engine: {kv_bytes, block_size, max_seq_len, max_step_tokens, prefix_cache}
//   scheduling: tiered | fifo
//   scheduler: {step_token_budget, max_chunk_tokens, max_queued_requests_total, ...}
//   tiers: [ {name, priority, share_min, share_max, borrow, max_queue_wait_ms,
//             on_timeout, max_queued_requests, max_queued_tokens, max_batch,
//             speculative, preemption_budget, queue} ]
//   tier_aliases: {priority: ultrafast, default: standard, flex: batch}
//   request_priorities: {ultrafast: 100, standard: 0, batch: -10}
//   metrics: {vllm_names}            log: {format, access}
//   default_tier: standard
//   limits: {max_header_bytes, max_body_bytes, max_tokens_cap, default_max_tokens, ...}
//   http: {threads, idle_timeout_ms, read_timeout_ms, write_timeout_ms, max_connections}
//   drain_timeout_ms: 30000
//   on_unentitled: downgrade | reject
//   keys: [ {name, sha256, tiers, default_tier, requests_per_min, tokens_per_min,
//            max_concurrent} ]
// docs/server.md is the reference with every default.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sched/config.h"
#include "server/openai_request.h"
#include "server/tier_names.h"

namespace ts::server {

struct ListenConfig {
  std::string host = "127.0.0.1";
  int32_t port = 8080;  // 0: any free port (the bound one is printed)
};

// An API key's entitlements. Limits of 0 mean unlimited.
struct KeyConfig {
  std::string name;                 // for logs and metrics, never the key itself
  std::string sha256;               // 64 lowercase hex digits of SHA-256(key)
  std::vector<std::string> tiers;   // allowed tiers; empty: all
  std::string default_tier;         // when the request names none; "": the global default
  int64_t requests_per_min = 0;
  int64_t tokens_per_min = 0;       // prompt + max_tokens charged at admission, unused refunded
  int32_t max_concurrent = 0;
};

enum class OnUnentitled : uint8_t { kDowngrade, kReject };

struct Limits {
  int64_t max_header_bytes = 16 * 1024;
  int64_t max_body_bytes = 4 * 1024 * 1024;
  int64_t max_tokens_cap = 0;       // largest max_tokens accepted; 0: the context length
  int64_t default_max_tokens = 256; // when the request gives none (clipped to the context)
  int32_t max_stop_strings = 16;
  int32_t max_messages = 1024;
  int32_t max_json_depth = 64;
};

struct HttpConfig {
  int32_t threads = 2;              // io_context threads: parse, tokenize, render, write
  int64_t idle_timeout_ms = 60000;  // keep-alive connection with no request
  int64_t read_timeout_ms = 30000;  // one request's header and body
  int64_t write_timeout_ms = 60000; // one write (a stalled client is dropped)
  int64_t max_connections = 1024;   // open at once on the main listener (503 beyond); 0: unlimited
  // A stream waiting in a queue gets a ": queued" comment this often (its headers went out
  // at admission): no proxy idle timeout cuts it. 0: none.
  int64_t queued_notice_ms = 10000;
};

struct EngineConfig {
  uint64_t kv_bytes = 0;            // 0: enough for the engine's default
  int32_t block_size = 16;
  int64_t max_seq_len = 0;          // 0: the model's context (capped by the engine)
  int64_t max_step_tokens = 512;
  bool prefix_cache = true;
};

// Speculative decoding for tiers with `speculative: true` (serving/draft.h: prompt lookup).
struct SpeculativeConfig {
  int32_t max_drafts = 4;           // draft tokens per step; 0: off
  int32_t max_ngram = 3;            // longest suffix looked up earlier in the request
  int32_t min_ngram = 2;            // shortest
};

struct ModelConfig {
  std::string path;                 // "": $TIERSERVE_MODEL, else the installed default model
  int32_t threads = 0;              // 0: one per core
  // Attention numerics (ops::AttnNumerics): "tiled" (F32 tiles), "on" (llama.cpp's
  // flash-attention rounding) or "off" (its rounding without flash attention); the YAML
  // takes tiled, or true/false for on/off.
  std::string flash_attn = "on";
  bool map_pack = false;            // read a pack's panels in place instead of copying them
  // The model's names in requests ("model") and responses; the first is the primary. Empty:
  // the file name without ".gguf". YAML: a string or a list.
  std::vector<std::string> served_names;
  // A system message put in front of chat requests that bring none ("": none, so the chat
  // template's own default applies, when it has one). Small chat models often answer
  // better with a plain one than with their template's default.
  std::string system_prompt;
  // Sampling for requests that leave a field out (YAML: temperature, top_p, top_k, min_p,
  // repetition_penalty; OpenAI's defaults otherwise): a small model's recommended settings.
  SamplingDefaults sampling;
};

struct MetricsConfig {
  // Also export the gauges gateways route on under vLLM's names (vllm:num_requests_waiting,
  // vllm:num_requests_running, vllm:kv_cache_usage_perc, vllm:cache_config_info), so that a
  // stock Endpoint Picker and vLLM dashboards work unconfigured.
  bool vllm_names = false;
};

struct LogConfig {
  std::string format = "text";      // text | json (lines on stderr)
  bool access = true;               // one line per finished request (not /health*, /metrics)
};

sched::SchedConfig server_default_sched();

struct ServerConfig {
  ListenConfig listen;
  ListenConfig admin{"127.0.0.1", -1};  // /metrics and /admin/*; port -1: on `listen`
  ModelConfig model;
  EngineConfig engine;
  SpeculativeConfig speculative;
  bool fifo = false;                // scheduling: fifo (tiers off, the isolation control)
  // sched::default_config() with what the machine decides left to it: the step budget and
  // the latency tier's burst are derived at start from the measured step cost ("auto").
  sched::SchedConfig sched = server_default_sched();
  // service_tier values -> tiers: OpenAI's (priority, default, flex, scale; "fast" is read as
  // priority) and any of one's own. Responses say a tier's OpenAI value: every tier needs
  // one. "auto" is not an alias: it means the key's default tier, else default_tier.
  std::map<std::string, std::string> tier_aliases = {{"priority", "ultrafast"}, {"default", "standard"}, {"flex", "batch"}};
  std::string default_tier = "standard";
  // A body `priority` (higher = more urgent) -> tiers: each tier's lowest priority
  // (tier_names.h). Used when service_tier is absent or auto.
  RequestPriorities request_priorities = default_request_priorities();
  Limits limits;
  HttpConfig http;
  int64_t drain_timeout_ms = 30000;
  OnUnentitled on_unentitled = OnUnentitled::kDowngrade;
  std::vector<KeyConfig> keys;
  MetricsConfig metrics;
  LogConfig log;
};

// Parses YAML text; `origin` names the file in messages. kInvalidArgument with the
// offending key's path ("tiers[1].share_min: ...") for syntax errors, unknown keys and
// values of the wrong type. Does not call validate().
Result<ServerConfig> parse_config(std::string_view yaml_text, std::string_view origin = "config");
// Reads and parses a file (kNotFound when it cannot be read).
Result<ServerConfig> load_config(const std::string& path);

// One override of a config key from outside the file: "a.b.c" = a YAML value ("64",
// "auto", "[x, y]"), from `--set a.b.c=V` or the environment (TIERSERVE_A__B__C=V).
// Tiers are addressed by name: tiers.standard.share_max.
struct ConfigOverride {
  std::string path;
  std::string value;
  std::string origin;  // "--set" or "TIERSERVE_..." (in messages)
};

// "a.b.c=V" -> an override; kInvalidArgument naming it when malformed.
Result<ConfigOverride> parse_set(std::string_view assignment);
// The config overrides among environment entries ("NAME=VALUE"): TIERSERVE_ followed by a
// key path whose segments are separated by "__" (TIERSERVE_SCHEDULER__STEP_TOKEN_BUDGET),
// or a top-level scalar key (TIERSERVE_DRAIN_TIMEOUT_MS). Other TIERSERVE_ variables
// (TIERSERVE_MODEL, TIERSERVE_ISA, TIERSERVE_LOG, ...) are not config keys and are left out.
std::vector<ConfigOverride> env_overrides(const char* const* environ_entries);
// The layers in order of precedence, lowest first: defaults, the file (path "" for none),
// the environment, the command line's --set. kInvalidArgument naming the key and where it
// came from for an unknown key or a bad value; kNotFound for a file that cannot be read.
Result<ServerConfig> load_layered_config(const std::string& path, const std::vector<ConfigOverride>& env,
                                         const std::vector<ConfigOverride>& sets);

// Cross-field checks: the tiers (sched::check_config), aliases and default tiers naming
// configured tiers, key hashes well-formed and unique, limits in range.
Status validate(const ServerConfig& c);

// Applies one command-line tier override "NAME.FIELD=VALUE" (e.g. "standard.max_queued_requests=4").
Status apply_tier_override(ServerConfig& c, std::string_view assignment);

// The config as YAML (every field, keys by hash), for `tierserve serve --print-config`.
std::string to_yaml(const ServerConfig& c);

}  // namespace ts::server
