// `tierserve serve`: the OpenAI-compatible HTTP server with service tiers.
//
// Startup: config file (--config, all fields defaulted) -> command-line overrides ->
// validate (exit 2 with a clear message) -> load the model, tokenizer and chat template ->
// the serving loop -> HTTP listeners -> "listening on http://HOST:PORT" on stdout.
// SIGTERM/SIGINT drain: stop accepting, refuse new work (503), let in-flight requests
// finish within drain_timeout_ms, cancel what is left (an explicit error to its client),
// flush, exit 0.
#include <CLI/CLI.hpp>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <pthread.h>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

#include "commands.h"
#include "core/check.h"
#include "core/build_info.h"
#include "core/clock.h"
#include "core/cpu_features.h"
#include "core/log.h"
#include "engine/model.h"
#include "kernels/traits.h"
#include "metrics/tierserve_metrics.h"
#include "model_path.h"
#include "models/register.h"
#include "server/app.h"
#include "server/config.h"
#include "service_util.h"
#include "server/http_server.h"
#include "server/service_backend.h"
#include "server/sha256.h"
#include "serving/service.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace ts::tools {
namespace {

int usage_error(const std::string& msg) {
  log_record(LogLevel::kError, "tierserve serve: " + msg);
  return 2;
}

int fail(const std::string& msg) {
  log_record(LogLevel::kError, "tierserve serve: error: " + msg);
  return 1;
}

// The model's name in responses and /v1/models: the file name without ".gguf".
std::string model_id_of(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".gguf") == 0) name.resize(name.size() - 5);
  return name;
}

struct Overrides {
  std::string config_path;
  std::string host, admin_host, model;
  int port = -2, admin_port = -2, threads = -1, http_threads = -1;
  int64_t kv_bytes = -1, max_seq_len = -1, step_budget = -1, drain_timeout_ms = -1, max_tokens_cap = -1;
  std::string scheduling, on_unentitled;
  std::vector<std::string> tiers, sets, served_names;
};

}  // namespace

int cmd_serve(int argc, char** argv) {
  Overrides o;
  std::string port_file, hash_key;
  bool print_config = false;
  CLI::App app{"OpenAI-compatible HTTP server with service tiers (docs/server.md).", "tierserve serve"};
  app.add_option("-c,--config", o.config_path, "YAML config file (default: built-in defaults; see config/tierserve.yaml)");
  app.add_option("--host", o.host, "listen address (listen.host)");
  app.add_option("-p,--port", o.port, "listen port, 0 for any free one (listen.port)")->check(CLI::Range(0, 65535));
  app.add_option("--port-file", port_file, "write the bound port to this file once listening");
  app.add_option("--admin-host", o.admin_host, "address of the /metrics and /admin listener (admin.host)");
  app.add_option("--admin-port", o.admin_port, "port of the /metrics and /admin listener; -1: on the main one (admin.port)")
      ->check(CLI::Range(-1, 65535));
  app.add_option("-m,--model", o.model, "GGUF model (model.path; default: $TIERSERVE_MODEL, else the installed default model)");
  app.add_option("-t,--threads", o.threads, "engine threads, 0: one per core (model.threads)")->check(CLI::Range(0, kMaxThreads));
  app.add_option("--http-threads", o.http_threads, "HTTP threads (http.threads)")->check(CLI::Range(1, 256));
  app.add_option("--kv-bytes", o.kv_bytes, "KV cache budget in bytes, 0: the engine's default (engine.kv_bytes)")
      ->check(CLI::Range(int64_t(0), INT64_MAX));
  app.add_option("--max-seq-len", o.max_seq_len, "positions per sequence, 0: the model's (engine.max_seq_len)")->check(CLI::Range(int64_t(0), INT64_MAX));
  app.add_option("--step-budget", o.step_budget, "tokens per engine step, all tiers (scheduler.step_token_budget)")
      ->check(CLI::Range(int64_t(1), INT64_MAX));
  app.add_option("--scheduling", o.scheduling, "tiered or fifo (scheduling)")->check(CLI::IsMember({"tiered", "fifo"}));
  app.add_option("--tier", o.tiers, "tier field override NAME.FIELD=VALUE, repeatable (e.g. standard.max_queued_requests=8)");
  app.add_option("--drain-timeout-ms", o.drain_timeout_ms, "how long SIGTERM waits for in-flight requests (drain_timeout_ms)")
      ->check(CLI::Range(int64_t(0), INT64_MAX));
  app.add_option("--max-tokens-cap", o.max_tokens_cap, "largest max_tokens accepted, 0: the context (limits.max_tokens_cap)")
      ->check(CLI::Range(int64_t(0), INT64_MAX));
  app.add_option("--on-unentitled", o.on_unentitled, "downgrade or reject a tier a key may not use (on_unentitled)")
      ->check(CLI::IsMember({"downgrade", "reject"}));
  app.add_option("--set", o.sets,
                 "set any config key KEY=VALUE, repeatable (e.g. scheduler.step_token_budget=64, tiers.standard.share_min=0.6); "
                 "the environment sets them too as TIERSERVE_KEY__PATH=VALUE; command line > environment > file > default");
  app.add_option("--served-model-name", o.served_names,
                 "the model's name(s) in requests and responses, repeatable (model.served_name; default: the file name)");
  std::string log_format;
  app.add_option("--log-format", log_format, "text or json lines on stderr (log.format)")->check(CLI::IsMember({"text", "json"}));
  app.add_option("--hash-key", hash_key, "print the sha256 of an API key for the config's keys[] and exit");
  app.add_flag("--print-config", print_config, "print the effective config as YAML and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!hash_key.empty()) {
    std::printf("%s\n", server::sha256_hex(hash_key).c_str());
    return 0;
  }

  if (!log_format.empty()) set_log_format(log_format == "json" ? LogFormat::kJson : LogFormat::kText);

  // --- configuration: defaults < file < environment < command line ---
  std::vector<server::ConfigOverride> sets;
  for (const auto& a : o.sets) {
    auto ov = server::parse_set(a);
    if (!ov.is_ok()) return usage_error(ov.status().message());
    sets.push_back(std::move(ov).value());
  }
  auto layered = server::load_layered_config(o.config_path, server::env_overrides(environ), sets);
  if (!layered.is_ok()) return usage_error("config: " + layered.status().message());
  server::ServerConfig cfg = std::move(layered).value();
  if (!o.served_names.empty()) cfg.model.served_names = o.served_names;
  if (!log_format.empty()) cfg.log.format = log_format;
  set_log_format(cfg.log.format == "json" ? LogFormat::kJson : LogFormat::kText);
  if (!o.host.empty()) cfg.listen.host = o.host;
  if (o.port != -2) cfg.listen.port = o.port;
  if (!o.admin_host.empty()) cfg.admin.host = o.admin_host;
  if (o.admin_port != -2) cfg.admin.port = o.admin_port;
  if (!o.model.empty()) cfg.model.path = o.model;
  if (o.threads >= 0) cfg.model.threads = o.threads;
  if (o.http_threads != -1) cfg.http.threads = o.http_threads;
  if (o.kv_bytes >= 0) cfg.engine.kv_bytes = uint64_t(o.kv_bytes);
  if (o.max_seq_len >= 0) cfg.engine.max_seq_len = o.max_seq_len;
  if (o.step_budget != -1) cfg.sched.step_token_budget = o.step_budget;
  if (!o.scheduling.empty()) cfg.fifo = o.scheduling == "fifo";
  if (o.drain_timeout_ms >= 0) cfg.drain_timeout_ms = o.drain_timeout_ms;
  if (o.max_tokens_cap >= 0) cfg.limits.max_tokens_cap = o.max_tokens_cap;
  if (!o.on_unentitled.empty())
    cfg.on_unentitled = o.on_unentitled == "reject" ? server::OnUnentitled::kReject : server::OnUnentitled::kDowngrade;
  for (const auto& t : o.tiers)
    if (Status st = server::apply_tier_override(cfg, t); !st.is_ok()) return usage_error(st.message());
  if (cfg.admin.port < -1 || cfg.admin.port > 65535) return usage_error("--admin-port out of range");
  if (Status st = server::validate(cfg); !st.is_ok()) return usage_error("config: " + st.message());
  if (print_config) {
    std::fputs(server::to_yaml(cfg).c_str(), stdout);
    return 0;
  }

  // Signals: blocked in every thread (the io and engine threads inherit the mask) and
  // taken synchronously by sigwait below. A peer that closed its socket must not kill us.
  const sigset_t sigs = block_stop_signals();

  // --- HTTP listeners first, so /health/live answers (and /health/ready says 503) while
  // the model loads; the App takes over once it is loaded. ---
  std::atomic<server::App*> app_ptr{nullptr};
  server::HttpServerOptions ho;
  ho.max_header_bytes = cfg.limits.max_header_bytes;
  ho.max_body_bytes = cfg.limits.max_body_bytes;
  ho.idle_timeout_ms = cfg.http.idle_timeout_ms;
  ho.read_timeout_ms = cfg.http.read_timeout_ms;
  ho.write_timeout_ms = cfg.http.write_timeout_ms;
  ho.max_connections = cfg.http.max_connections;
  server::HttpServer http(ho);
  auto dispatch_to = [&app_ptr](server::Listener which) {
    return [&app_ptr, which](const server::HttpRequest& r, std::shared_ptr<server::Responder> out) {
      if (server::App* a = app_ptr.load()) return a->handle(r, std::move(out), which);
      out->respond(server::loading_response(r));
    };
  };
  auto main_port = http.listen(cfg.listen.host, cfg.listen.port, dispatch_to(server::Listener::kMain));
  if (!main_port.is_ok()) return fail(main_port.status().message());
  int admin_port = -1;
  if (cfg.admin.port >= 0) {
    auto p = http.listen(cfg.admin.host, cfg.admin.port, dispatch_to(server::Listener::kAdmin), /*limit_connections=*/false);
    if (!p.is_ok()) return fail(p.status().message());
    admin_port = *p;
  }
  http.start(cfg.http.threads);

  // --- model ---
  std::string model_path = cfg.model.path;
  if (model_path.empty()) {
    model_path = default_model_path();
    struct stat st {};
    if (::stat(model_path.c_str(), &st) != 0)
      return fail("no model given and the default model " + model_path +
                  " is not installed: run scripts/setup-model.sh (or pass -m MODEL.gguf)");
  }
  models::register_all();
  engine::ModelOptions mo;
  mo.n_threads = cfg.model.threads;
  // The CLI or the config has checked the name.
  TS_CHECK(ops::parse_attn_numerics(cfg.model.flash_attn, &mo.attn_numerics));
  mo.copy_pack = !cfg.model.map_pack;
  const int64_t t_load = now_ns();
  auto model = engine::Model::load(model_path, mo);
  if (!model.is_ok()) return fail(model.status().to_string());
  auto tokenizer = tok::Tokenizer::from_gguf((*model)->gguf());
  if (!tokenizer.is_ok()) return fail("tokenizer: " + tokenizer.status().to_string());
  auto chat = tok::ChatTemplate::detect((*model)->gguf());
  if (!chat.is_ok()) return fail("chat template: " + chat.status().to_string());

  serving::ServiceOptions so;
  so.engine.kv_bytes = cfg.engine.kv_bytes;
  so.engine.block_size = cfg.engine.block_size;
  so.engine.max_seq_len = cfg.engine.max_seq_len;
  so.engine.max_step_tokens = cfg.engine.max_step_tokens;
  so.engine.prefix_cache = cfg.engine.prefix_cache;
  so.sched = cfg.sched;
  so.fifo = cfg.fifo;
  so.spec_max_drafts = cfg.speculative.max_drafts;
  so.spec_max_ngram = cfg.speculative.max_ngram;
  so.spec_min_ngram = cfg.speculative.min_ngram;
  so.max_output_tokens = cfg.limits.max_tokens_cap;
  so.wait_notice_ms = cfg.http.queued_notice_ms;
  auto registry = metrics::make_tierserve_registry();
  auto service = serving::Service::create(**model, **tokenizer, *chat, so, registry.get());
  if (!service.is_ok()) return fail("serving: " + service.status().to_string());
  serving::Service& svc = **service;
  const serving::Stats st0 = svc.stats();
  {
    std::string tiers;
    for (const auto& t : svc.sched_config().tiers) tiers += (tiers.empty() ? "" : " ") + t.name;
    char line[1024];
    std::snprintf(line, sizeof line,
                  "tierserve serve: model %s loaded in %.0f ms; chat template %s (%s); context %lld; KV %d blocks of %d "
                  "(%.1f MiB); scheduling %s; tiers %s; %zu API keys; kernels %s (%s); attention %s; tierserve %s (git %s)",
                  model_path.c_str(), double(now_ns() - t_load) / 1e6,
                  std::string(tok::chat_family_name(chat->family())).c_str(), chat->reason().c_str(),
                  (long long)svc.max_seq_len(), st0.kv.total, st0.kv.block_size, double(st0.kv.bytes) / (1024.0 * 1024.0),
                  cfg.fifo ? "fifo" : "tiered", tiers.c_str(), cfg.keys.size(), kernels::isa_name(kernels::best_isa()),
                  cpu_features().to_string().c_str(), ops::attn_numerics_name(mo.attn_numerics), build_version(),
                  build_git_revision());
    log_record(LogLevel::kInfo, line);
  }
  // The bounds derived from this machine's measured step cost (docs/scheduler.md, bounds).
  const sched::StepCost& cost = st0.step_cost;
  if (cost.measured()) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "tierserve serve: step cost measured: %.2f ms + %.3f ms per token + %.3f ms per output row + %.2f ns per "
                  "attention pair (%d layers); step budget %lld tokens%s; uninterruptible stretch at most %.1f ms",
                  cost.fixed_ns / 1e6, cost.token_ns / 1e6, cost.output_ns / 1e6, cost.pair_ns, cost.n_layers,
                  (long long)st0.step_token_budget, cfg.sched.step_token_budget == 0 ? " (auto)" : "",
                  cost.segment_ns(st0.step_token_budget, 0) / 1e6);
    std::string text = line;
    for (const auto& t : svc.sched_config().tiers)
      if (t.burst_tokens > 0) text += "; " + t.name + " burst " + std::to_string(t.burst_tokens) + " tokens";
    for (const auto& [tier, ns] : st0.wait_bound_ns)
      text += "; " + svc.sched_config().tiers[size_t(tier)].name + " waits behind other tiers at most " +
              std::to_string(int64_t(double(ns) / 1e6)) + " ms";
    log_record(LogLevel::kInfo, text);
  } else {
    TS_LOG_INFO("tierserve serve: step cost not measured; step budget %lld tokens", (long long)st0.step_token_budget);
  }

  // --- HTTP: the App takes over the listeners now that the model is loaded ---
  SteadyClock clock;
  server::ServiceBackend backend(svc);
  server::App http_app(cfg, backend, registry.get(), clock, model_id_of(model_path));
  http_app.set_connection_stats([&http] { return http.connection_stats(); });
  app_ptr.store(&http_app);
  std::printf("listening on http://%s:%d\n", cfg.listen.host.c_str(), *main_port);
  if (admin_port >= 0) std::printf("admin on http://%s:%d\n", cfg.admin.host.c_str(), admin_port);
  std::fflush(stdout);
  if (!port_file.empty() && !write_port_file(port_file, *main_port))
    TS_LOG_WARN("tierserve serve: cannot write --port-file %s", port_file.c_str());
  sd_notify_state("READY=1\nSTATUS=serving");

  // --- wait for SIGTERM/SIGINT, then drain ---
  const int sig = wait_for_stop_signal(sigs);
  TS_LOG_INFO("tierserve serve: %s: draining (%lld in flight, up to %lld ms)", sig == SIGINT ? "SIGINT" : "SIGTERM",
              (long long)svc.stats().n_active, (long long)cfg.drain_timeout_ms);
  sd_notify_state("STOPPING=1\nSTATUS=draining");
  http_app.begin_drain();
  http.stop_accepting();
  svc.begin_drain();
  const bool idle = svc.wait_idle(cfg.drain_timeout_ms);
  if (!idle)
    TS_LOG_WARN("tierserve serve: drain timeout: cancelling %lld requests", (long long)svc.stats().n_active);
  svc.shutdown();  // cancels what is left: each gets an explicit error
  // Let the HTTP threads write the last responses (bounded: a stalled client is dropped).
  const int64_t flush_deadline = now_ns() + 2000000000LL;
  while (http.in_flight() > 0 && now_ns() < flush_deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  http.stop();
  TS_LOG_INFO("tierserve serve: stopped");
  return 0;
}

}  // namespace ts::tools
