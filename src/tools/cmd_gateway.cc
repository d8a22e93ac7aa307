// tierserve gateway: one OpenAI-compatible endpoint in front of many workers and models
// (docs/gateway.md). Reads the fleet's config, starts its local workers, serves until
// SIGTERM/SIGINT, then drains: new requests 503, in-flight and queued ones finish (up to
// drain_timeout_ms), the local workers are stopped.
#include <CLI/CLI.hpp>
#include <cstring>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "core/clock.h"
#include "core/log.h"
#include "gateway/gateway.h"
#include "service_util.h"

namespace ts::tools {
namespace {

int usage_error(const std::string& msg) {
  log_record(LogLevel::kError, "tierserve gateway: " + msg);
  return 2;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "tierserve";
  buf[n] = '\0';
  return buf;
}

}  // namespace

int cmd_gateway(int argc, char** argv) {
  std::string config_path, host, port_file, work_dir, serve_binary, log_format;
  int port = -2, admin_port = -2;
  bool check = false;
  CLI::App app{"One tier-aware OpenAI endpoint in front of many workers and models (docs/gateway.md).", "tierserve gateway"};
  app.add_option("-c,--config", config_path, "the fleet's YAML config (see config/gateway.yaml)")->required();
  app.add_option("--host", host, "listen address (listen.host)");
  app.add_option("-p,--port", port, "listen port, 0 for any free one (listen.port)")->check(CLI::Range(0, 65535));
  app.add_option("--admin-port", admin_port, "port of the /metrics and /admin listener; -1: on the main one")->check(CLI::Range(-1, 65535));
  app.add_option("--port-file", port_file, "write the bound port to this file once listening");
  app.add_option("--work-dir", work_dir, "where local workers' port files and logs go (default: a new $TMPDIR/tierserve-gateway.*)");
  app.add_option("--serve-binary", serve_binary, "the tierserve binary local workers run (default: this one)");
  app.add_option("--log-format", log_format, "text or json lines on stderr (log.format)")->check(CLI::IsMember({"text", "json"}));
  app.add_flag("--check-config", check, "validate the config and exit (0: valid, 2: the error)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto loaded = gateway::load_gateway_config(config_path);
  if (!loaded.is_ok()) return usage_error(loaded.status().message());
  gateway::GatewayConfig cfg = std::move(loaded).value();
  if (!host.empty()) cfg.listen.host = host;
  if (port != -2) cfg.listen.port = port;
  if (admin_port != -2) cfg.admin.port = admin_port;
  if (!log_format.empty()) cfg.log.format = log_format;
  set_log_format(cfg.log.format == "json" ? LogFormat::kJson : LogFormat::kText);
  if (Status st = gateway::validate(cfg); !st.is_ok()) return usage_error("config: " + st.message());
  if (check) return 0;
  if (serve_binary.empty()) serve_binary = cfg.serve_binary.empty() ? self_exe() : cfg.serve_binary;
  if (work_dir.empty()) {
    // A fresh private directory under $TMPDIR (else /tmp): mkdtemp(3) fills in the name's
    // last six characters.
    const char* tmp = std::getenv("TMPDIR");
    std::string name = std::string(tmp && *tmp ? tmp : "/tmp") + "/tierserve-gateway.";
    name.append(6, 'X');
    if (!::mkdtemp(name.data())) return usage_error("cannot create a work directory " + name + ": " + std::strerror(errno));
    work_dir = name;
  } else if (::mkdir(work_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return usage_error("cannot create --work-dir " + work_dir);
  }

  const sigset_t sigs = block_stop_signals();

  SteadyClock clock;
  auto g = gateway::Gateway::create(cfg, serve_binary, work_dir, clock);
  if (!g.is_ok()) return usage_error(g.status().message());
  if (Status st = (*g)->start(); !st.is_ok()) {
    log_record(LogLevel::kError, "tierserve gateway: error: " + st.message());
    return 1;
  }
  {
    std::string workers;
    for (const auto& w : cfg.workers)
      workers += (workers.empty() ? "" : ", ") + w.name + " (" + std::string(gateway::worker_kind_name(w.kind)) + ", " + w.model +
                 ", pool " + w.pool + ")";
    log_record(LogLevel::kInfo, "tierserve gateway: workers " + workers + "; router '" + cfg.router.name + "'; work dir " + work_dir);
  }
  std::printf("listening on http://%s:%d\n", cfg.listen.host.c_str(), (*g)->port());
  if ((*g)->admin_port() >= 0) std::printf("admin on http://%s:%d\n", cfg.admin.host.c_str(), (*g)->admin_port());
  std::fflush(stdout);
  if (!port_file.empty() && !write_port_file(port_file, (*g)->port()))
    log_record(LogLevel::kWarn, "tierserve gateway: cannot write --port-file " + port_file);
  sd_notify_state("READY=1\nSTATUS=routing");
  const int sig = wait_for_stop_signal(sigs);
  log_record(LogLevel::kInfo, std::string("tierserve gateway: ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + ": draining");
  sd_notify_state("STOPPING=1\nSTATUS=draining");
  (*g)->drain_and_stop();
  g->reset();
  log_record(LogLevel::kInfo, "tierserve gateway: stopped");
  return 0;
}

}  // namespace ts::tools
