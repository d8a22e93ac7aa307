// What the gateway's black-box tests share: the models (stories260K, a 15M llama made
// once), waiting for a gateway, metric sums, a fake worker that answers what it is told,
// request bodies. Include after defining TS_GATEWAY_TEST_DIR (each test binary's own work
// directory under the build tree, so that two run at once without sharing files).
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "server.h"

namespace ts {
namespace {


using json = nlohmann::json;
using namespace ts::testing_server;

const std::string kStories = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kWork = std::string(TS_BINARY_DIR) + "/" + TS_GATEWAY_TEST_DIR;
const std::string kSlow = kWork + "/llama15m_q8_0.gguf";

inline void prepare() {
  static bool done = false;
  if (done) return;
  ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0);
  if (!std::ifstream(kSlow)) {
    const std::string cmd = std::string(TS_TIERSERVE_BIN) + " make-model --arch llama --shape 15m --type q8_0 -o '" + kSlow +
                            "' > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  done = true;
}

inline json body_json(const HttpResult& r) { return json::parse(r.body, nullptr, false); }

using HeaderList = std::vector<std::pair<std::string, std::string>>;

inline json stats(int port, const HeaderList& h = {}) { return body_json(http(port, "GET", "/admin/stats", "", h)); }

// Waits until every worker (or the named ones) passes its health checks.
inline bool wait_up(int port, const std::set<std::string>& names = {}, int timeout_ms = 60000, const HeaderList& h = {}) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const json s = stats(port, h);
    if (s.is_object() && s.contains("workers")) {
      bool all = true;
      for (const auto& w : s["workers"])
        if (names.empty() || names.count(w["name"].get<std::string>())) all = all && w["up"].get<bool>();
      if (all) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

inline double metric_sum(const std::string& text, const std::string& prefix) {
  double sum = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) sum += std::atof(line.substr(line.rfind(' ') + 1).c_str());
  return sum;
}

inline std::string completion(const std::string& model, const std::string& prompt, int max_tokens, bool stream,
                       const std::string& tier = "", bool ignore_eos = false) {
  json b = {{"model", model}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
  if (stream) b["stream"] = true;
  if (!tier.empty()) b["service_tier"] = tier;
  if (ignore_eos) b["ignore_eos"] = true;
  return b.dump();
}

// A worker of our own on loopback: answers health and metrics, and completions with a
// canned OpenAI body or stream, or — per request or from a switch — hangs, or answers
// garbage: a 200 that is not JSON ("garbage200" in the prompt), a 500 HTML page
// ("html500"), a stream cut after one event ("cut").
class FakeWorker {
 public:
  FakeWorker() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 64);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_ = std::thread([this] { accept_loop(); });
  }
  ~FakeWorker() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    accept_.join();
    std::lock_guard<std::mutex> lk(mu_);
    for (int c : conns_) ::shutdown(c, SHUT_RDWR);
    for (auto& t : threads_) t.join();
  }
  int port() const { return port_; }
  void hang(bool on) { hang_ = on; }
  // Draining: its health check answers 503 (as a tierserve worker does after SIGTERM).
  void drain(bool on) { drain_ = on; }
  int completions() const { return n_completions_.load(); }
  std::string last_body() const {
    std::lock_guard<std::mutex> lk(mu_);
    return last_body_;
  }
  // The request line and headers of the last completion, lowercased.
  std::string last_head() const {
    std::lock_guard<std::mutex> lk(mu_);
    return last_head_;
  }

 private:
  void accept_loop() {
    while (!stop_) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) {
        if (stop_) return;
        continue;
      }
      std::lock_guard<std::mutex> lk(mu_);
      conns_.push_back(c);
      threads_.emplace_back([this, c] { serve(c); });
    }
  }
  void serve(int c) {
    std::string buf;
    char tmp[4096];
    for (;;) {
      size_t he;
      while ((he = buf.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
        if (n <= 0) return close_conn(c);
        buf.append(tmp, size_t(n));
      }
      const std::string head = buf.substr(0, he);
      size_t cl = 0;
      const size_t at = head.find("Content-Length: ");
      if (at == std::string::npos) {
        const size_t at2 = head.find("content-length: ");
        if (at2 != std::string::npos) cl = std::stoul(head.substr(at2 + 16));
      } else {
        cl = std::stoul(head.substr(at + 16));
      }
      while (buf.size() < he + 4 + cl) {
        const ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
        if (n <= 0) return close_conn(c);
        buf.append(tmp, size_t(n));
      }
      const std::string body = buf.substr(he + 4, cl);
      buf.erase(0, he + 4 + cl);
      if (hang_) {  // keep the socket, answer nothing
        while (!stop_ && ::recv(c, tmp, sizeof tmp, 0) > 0) {
        }
        return close_conn(c);
      }
      const std::string path = head.substr(head.find(' ') + 1, head.find(' ', head.find(' ') + 1) - head.find(' ') - 1);
      if ((path == "/health/ready" || path == "/health") && drain_) {
        reply(c, 503, "application/json", R"({"status":"draining"})");
      } else if (path == "/health/ready" || path == "/health") {
        reply(c, 200, "application/json", R"({"status":"ready"})");
      } else if (path == "/metrics") {
        reply(c, 200, "text/plain", "tierserve_num_requests_waiting 0\ntierserve_num_requests_running 0\n");
      } else if (path == "/v1/completions") {
        ++n_completions_;
        {
          std::lock_guard<std::mutex> lk(mu_);
          last_body_ = body;
          last_head_ = head;
          for (char& ch : last_head_) ch = char(std::tolower(static_cast<unsigned char>(ch)));
        }
        if (body.find("garbage200") != std::string::npos) {
          reply(c, 200, "application/json", "this is not json");
        } else if (body.find("html500") != std::string::npos) {
          reply(c, 500, "text/html", "<html><body>Internal Server Error</body></html>");
        } else if (body.find("cut") != std::string::npos) {
          std::string r = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
          const std::string ev = R"(data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":"Once","finish_reason":null}]})"
                                 "\n\n";
          char size[16];
          std::snprintf(size, sizeof size, "%zx\r\n", ev.size());
          r += size + ev + "\r\n";
          send_all(c, r);
          return close_conn(c);  // cut mid-stream
        } else {
          reply(c, 200, "application/json",
                R"({"id":"fake","object":"text_completion","model":"stories","choices":[{"index":0,"text":" from the fake","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}})");
        }
      } else {
        reply(c, 404, "application/json", R"({"error":{"message":"no","type":"not_found_error","code":"not_found"}})");
      }
    }
  }
  void reply(int c, int status, const std::string& ct, const std::string& body) {
    send_all(c, "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: " + ct + "\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  void close_conn(int c) { ::shutdown(c, SHUT_RDWR); }

  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false}, hang_{false}, drain_{false};
  std::atomic<int> n_completions_{0};
  std::thread accept_;
  mutable std::mutex mu_;
  std::string last_body_, last_head_;
  std::vector<int> conns_;
  std::vector<std::thread> threads_;
};

inline std::string local_worker(const std::string& name, const std::string& model, const std::string& path, const std::string& pool,
                         int max_inflight = 4) {
  return "  - {name: " + name + ", kind: local, model: " + model + ", path: '" + path + "', threads: 1, pool: " + pool +
         ", max_inflight: " + std::to_string(max_inflight) + "}\n";
}

const std::string kHealth = "health: {interval_ms: 100, timeout_ms: 400}\n";

}  // namespace
}  // namespace ts
