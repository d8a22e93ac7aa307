// The HTTP edge of `tierserve serve` and of `tierserve gateway` (the part that faces the
// internet; it serves through the same HTTP layer) as an attacker and a crowd see it, over
// raw sockets on the real binaries, every case against both: request smuggling (a body never runs as a request), a flood over
// http.max_connections (every refused connection gets a complete 503, none a reset),
// framing errors after a good request on a keep-alive connection (answered, then closed),
// a body shorter than its Content-Length (408 after the read timeout), and the idle
// shutdown (prompt).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <thread>

#include "testing/server.h"

namespace ts {
namespace {

using json = nlohmann::json;
using namespace ts::testing_server;

const std::string kStories = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kWork = std::string(TS_BINARY_DIR) + "/http_hardening_test";

struct Raw {
  std::string bytes;  // everything read until EOF
  bool reset = false; // the read ended in ECONNRESET (or another error) instead of EOF
};

// Sends `req` (possibly several requests) and reads until the server closes.
Raw exchange(int port, const std::string& req) {
  Raw out;
  const int fd = connect_to(port);
  if (fd < 0) {
    out.reset = true;
    return out;
  }
  if (!send_all(fd, req)) out.reset = true;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      out.reset = true;
      break;
    }
    out.bytes.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

std::string error_code(const HttpResult& r) {
  try {
    return json::parse(r.body)["error"]["code"].get<std::string>();
  } catch (...) {
    return "(no error body: " + r.body + ")";
  }
}

// The HTTP settings both front ends run with.
const std::string kEdge =
    "limits: {max_header_bytes: 4096, max_body_bytes: 16384}\n"
    "http: {threads: 2, read_timeout_ms: 500, max_connections: 64}\n";

// A gateway in front of one local worker on stories260K (the worker's own edge is not
// what is tested here: the gateway answers every case before any byte reaches it).
std::string gateway_config() {
  return kEdge + "workers:\n  - {name: w, kind: local, model: stories, path: '" + kStories +
         "', threads: 1, pool: shared}\nhealth: {interval_ms: 100, timeout_ms: 400}\n";
}

bool start_front(ServerProcess& p, const std::string& kind, const std::string& extra_config) {
  if (kind == "serve") return p.start(TS_TIERSERVE_BIN, extra_config, {"-m", kStories, "-t", "1"});
  return p.start_command(TS_TIERSERVE_BIN, "gateway", extra_config, {"--work-dir", kWork + "/" + p.name() + ".d"});
}

// A gateway is ready once its worker is: /health/ready answers 200.
bool wait_ready(int port) {
  for (int i = 0; i < 600; ++i) {
    if (http(port, "GET", "/health/ready").status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Each test runs against `serve` and against `gateway` (the parameter).
class Hardening : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0);
    srv = new ServerProcess(kWork, "hard");
    ASSERT_TRUE(start_front(*srv, "serve", kEdge)) << srv->stderr_text();
    gw = new ServerProcess(kWork, "hard-gw");
    ASSERT_TRUE(start_front(*gw, "gateway", gateway_config())) << gw->stderr_text();
    ASSERT_TRUE(wait_ready(gw->port())) << gw->stderr_text();
  }
  static void TearDownTestSuite() {
    for (ServerProcess* p : {srv, gw}) {
      if (!p) continue;
      EXPECT_EQ(p->stop(SIGTERM), 0) << p->stderr_text();
      delete p;
    }
    srv = gw = nullptr;
  }
  int port() const { return GetParam() == "serve" ? srv->port() : gw->port(); }
  // Text only the front end's /admin/stats answers with: seeing it means a hidden request ran.
  std::string stats_marker() const { return GetParam() == "serve" ? "n_steps" : "\"workers\""; }
  static ServerProcess* srv;
  static ServerProcess* gw;
};
ServerProcess* Hardening::srv = nullptr;
ServerProcess* Hardening::gw = nullptr;

// --- 1. smuggling ---------------------------------------------------------------------

TEST_P(Hardening, TransferEncodingNotEndingInChunkedIs400AndTheBodyNeverRuns) {
  const std::string hidden = "GET /admin/stats HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const std::string te : {"gzip", "identity", "deflate", "chunked, gzip", "gzip;q=1"}) {
    const Raw r = exchange(port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + te +
                                            "\r\nContent-Type: application/json\r\n\r\n" + hidden);
    EXPECT_FALSE(r.reset) << te;
    EXPECT_EQ(count(r.bytes, "HTTP/1.1 "), 1u) << te << ":\n" << r.bytes;  // one response, not two
    const HttpResult p = parse_response(r.bytes);
    EXPECT_EQ(p.status, 400) << te;
    EXPECT_EQ(p.header("connection"), "close") << te;
    EXPECT_EQ(error_code(p), "bad_transfer_encoding") << te;
    EXPECT_EQ(r.bytes.find(stats_marker()), std::string::npos) << "the hidden request ran: " << r.bytes;
  }
}

TEST_P(Hardening, ContentLengthWithTransferEncodingIsRefusedAndTheConnectionClosed) {
  const Raw r = exchange(port(),
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "0\r\n\r\nGET /admin/stats HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(count(r.bytes, "HTTP/1.1 "), 1u) << r.bytes;
  const HttpResult p = parse_response(r.bytes);
  EXPECT_EQ(p.status, 400);
  EXPECT_EQ(p.header("connection"), "close");
  EXPECT_EQ(r.bytes.find(stats_marker()), std::string::npos);
}

// --- 3. framing errors after a good request ---------------------------------------------

TEST_P(Hardening, FramingErrorAfterAGoodRequestIsAnsweredThenClosed) {
  const std::string good = "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n";
  const struct {
    std::string bytes;
    int status;
    std::string code;
  } cases[] = {
      {"\x16\x03\x01garbage\r\n\r\n", 400, "bad_request"},
      {"GET /health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(5000, 'a') + "\r\n\r\n", 431, "header_too_large"},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad_chunk"},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", 400, "bad_content_length"},
      {"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n", 413, "body_too_large"},
  };
  for (const auto& c : cases) {
    const Raw r = exchange(port(), good + c.bytes);
    EXPECT_FALSE(r.reset) << c.code;
    ASSERT_EQ(count(r.bytes, "HTTP/1.1 "), 2u) << c.code << ":\n" << r.bytes;
    const size_t second = r.bytes.find("HTTP/1.1 ", 1);
    EXPECT_EQ(r.bytes.rfind("HTTP/1.1 200", 0), 0u) << r.bytes;
    const HttpResult p = parse_response(r.bytes.substr(second));
    EXPECT_EQ(p.status, c.status) << c.code << ":\n" << r.bytes;
    EXPECT_EQ(error_code(p), c.code);
    EXPECT_EQ(p.header("connection"), "close");
  }
}

TEST_P(Hardening, ShortBodyGets408AfterTheReadTimeout) {
  for (bool after_good : {false, true}) {
    const int fd = connect_to(port());
    ASSERT_GE(fd, 0);
    std::string head = after_good ? "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n" : "";
    ASSERT_TRUE(send_all(fd, head + "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro"));
    std::string raw;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      raw.append(buf, size_t(n));
    }
    ::close(fd);
    const size_t last = raw.rfind("HTTP/1.1 ");
    ASSERT_NE(last, std::string::npos) << raw;
    const HttpResult p = parse_response(raw.substr(last));
    EXPECT_EQ(p.status, 408) << raw;
    EXPECT_EQ(error_code(p), "request_timeout");
    EXPECT_EQ(p.header("connection"), "close");
  }
}

// --- 2. connections over the limit ------------------------------------------------------

TEST_P(Hardening, EveryConnectionOverTheLimitGetsAComplete503) {
  // The 64 slots are held by idle keep-alive connections; 300 more arrive at once.
  std::vector<int> held;
  for (int i = 0; i < 64; ++i) {
    const int fd = connect_to(port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(request_on(fd, "GET", "/health/live").status, 200) << i;
    held.push_back(fd);
  }
  constexpr int kBurst = 300;
  std::atomic<int> answered{0}, resets{0}, other{0};
  std::vector<std::thread> crowd;
  std::atomic<bool> go{false};
  for (int i = 0; i < kBurst; ++i) {
    crowd.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      const Raw r = exchange(port(), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                          "Content-Length: 30\r\n\r\n{\"prompt\":\"Hi\",\"max_tokens\":1}");
      if (r.reset) {
        resets.fetch_add(1);
        return;
      }
      const HttpResult p = parse_response(r.bytes);
      const size_t he = r.bytes.find("\r\n\r\n");
      const bool complete = he != std::string::npos &&
                            r.bytes.size() - he - 4 == size_t(std::atoll(p.header("content-length").c_str()));
      if (p.status == 503 && complete && std::atoi(p.header("retry-after").c_str()) >= 1 && error_code(p) == "overloaded")
        answered.fetch_add(1);
      else
        other.fetch_add(1);
    });
  }
  go.store(true);
  for (auto& t : crowd) t.join();
  EXPECT_EQ(resets.load(), 0);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(answered.load(), kBurst);
  // The held connections were not disturbed.
  for (int fd : held) {
    EXPECT_EQ(request_on(fd, "GET", "/health/live").status, 200);
    ::close(fd);
  }
}

// --- 5. shutdown --------------------------------------------------------------------------

class HardeningShutdown : public ::testing::TestWithParam<std::string> {};

TEST_P(HardeningShutdown, IdleServerStopsPromptlyOnSigterm) {
  ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0);
  ServerProcess srv(kWork, "idle-" + GetParam());
  ASSERT_TRUE(start_front(srv, GetParam(), GetParam() == "serve" ? "" : gateway_config())) << srv.stderr_text();
  if (GetParam() == "gateway") ASSERT_TRUE(wait_ready(srv.port())) << srv.stderr_text();
  // Framing errors after good requests happened before (each once left a request counted
  // in flight forever, so that SIGTERM waited out its 2 s flush deadline).
  for (int i = 0; i < 3; ++i) {
    const Raw r = exchange(srv.port(), "GET /health/live HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n");
    ASSERT_EQ(count(r.bytes, "HTTP/1.1 "), 2u) << r.bytes;
  }
  // An idle keep-alive connection is open too: it must not hold the exit up.
  const int fd = connect_to(srv.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(request_on(fd, "GET", "/health/live").status, 200);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(srv.stop(SIGTERM), 0) << srv.stderr_text();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // Nothing is in flight: no wait is owed to anyone (it took 2 s before).
  EXPECT_LT(ms, 1000.0) << srv.stderr_text();
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Fronts, Hardening, ::testing::Values("serve", "gateway"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
INSTANTIATE_TEST_SUITE_P(Fronts, HardeningShutdown, ::testing::Values("serve", "gateway"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace ts
