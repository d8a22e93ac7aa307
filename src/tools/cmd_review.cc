// tierserve review --db FILE: the blind A/B review of the gateway's shadow pairs in a
// browser (docs/gateway.md: review). Serves until SIGTERM/SIGINT.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <string>

#include "commands.h"
#include "core/log.h"
#include "gateway/review.h"
#include "server/http_server.h"
#include "service_util.h"

namespace ts::tools {

int cmd_review(int argc, char** argv) {
  std::string db_path, host = "127.0.0.1", port_file;
  int port = 8090;
  CLI::App app{"The blind A/B review of shadow pairs: a page per pair, verdicts, a report (docs/gateway.md).", "tierserve review"};
  app.add_option("--db", db_path, "the gateway's pair database (shadow.db)")->required();
  app.add_option("--host", host, "listen address");
  app.add_option("-p,--port", port, "listen port, 0 for any free one")->check(CLI::Range(0, 65535));
  app.add_option("--port-file", port_file, "write the bound port to this file once listening");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto db = gateway::PairDb::open(db_path);
  if (!db.is_ok()) {
    log_record(LogLevel::kError, "tierserve review: " + db.status().message());
    return 2;
  }
  const sigset_t sigs = block_stop_signals();
  gateway::ReviewApp review(std::move(db).value());
  server::HttpServer http{server::HttpServerOptions{}};
  auto bound = http.listen(host, port, [&review](const server::HttpRequest& q, std::shared_ptr<server::Responder> o) {
    review.dispatch(q, std::move(o));
  });
  if (!bound.is_ok()) {
    log_record(LogLevel::kError, "tierserve review: " + bound.status().message());
    return 1;
  }
  http.start(2);
  std::printf("review on http://%s:%d\n", host.c_str(), *bound);
  std::fflush(stdout);
  if (!port_file.empty() && !write_port_file(port_file, *bound))
    log_record(LogLevel::kWarn, "tierserve review: cannot write --port-file " + port_file);
  (void)wait_for_stop_signal(sigs);
  http.stop_accepting();
  http.stop();
  return 0;
}

}  // namespace ts::tools
