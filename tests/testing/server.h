// Helpers for the black-box tests of `tierserve serve`: start the real binary on port 0
// with a config file, a minimal blocking HTTP/1.1 client (Content-Length, chunked and
// read-to-close bodies), and SSE event splitting.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process.h"

namespace ts::testing_server {

using testing_proc::slurp;

// One `tierserve serve` process. Start() waits for the port file (the server writes it
// once it listens); the destructor kills it if a test did not stop it.
class ServerProcess {
 public:
  ServerProcess(std::string work_dir, std::string name) : dir_(std::move(work_dir)), name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }

  // Writes `config_yaml` and runs `tierserve serve -c CONFIG --port 0 --port-file F args...`.
  bool start(const std::string& bin, const std::string& config_yaml, const std::vector<std::string>& args) {
    return start_command(bin, "serve", config_yaml, args);
  }
  // The same for another subcommand that takes -c, --port and --port-file (gateway).
  bool start_command(const std::string& bin, const std::string& command, const std::string& config_yaml,
                     const std::vector<std::string>& args, int timeout_s = 60) {
    const std::string cfg = dir_ + "/" + name_ + ".yaml", port_file = dir_ + "/" + name_ + ".port";
    std::ofstream(cfg) << config_yaml;
    ::unlink(port_file.c_str());
    std::vector<std::string> argv_s = {bin, command, "-c", cfg, "--port", "0", "--port-file", port_file};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    out_ = dir_ + "/" + name_ + ".stdout";
    err_ = dir_ + "/" + name_ + ".stderr";
    pid_ = testing_proc::spawn(argv_s, out_, err_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string p = slurp(port_file);
      if (!p.empty() && p.back() == '\n') {
        port_ = std::stoi(p);
        return true;
      }
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Sends `sig` and waits for the exit; returns the exit status (or 128 + signal).
  int stop(int sig = SIGTERM, int timeout_s = 30) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    return wait(timeout_s);
  }
  void signal(int sig) const { ::kill(pid_, sig); }
  int wait(int timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    int st = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -2;  // still running
  }

  int port() const { return port_; }
  // The exit status of a process that exited while start() waited for it (-1: none).
  int exit_code() const { return exit_code_; }
  std::string stdout_text() const { return slurp(out_); }
  std::string stderr_text() const { return slurp(err_); }

 private:
  std::string dir_, name_, out_, err_;
  pid_t pid_ = -1;
  int port_ = 0;
  int exit_code_ = -1;
};

struct HttpResult {
  int status = 0;  // 0: no response (connection failed or closed early)
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;                            // de-chunked
  std::string header(const std::string& n) const {
    auto it = headers.find(n);
    return it == headers.end() ? "" : it->second;
  }
};

// The sha256 a config's keys[] holds for KEY (`BIN serve --hash-key`); WORK_DIR takes the
// command's output files.
inline std::string hash_key(const std::string& bin, const std::string& key, const std::string& work_dir) {
  std::string h = testing_proc::run_captured({bin, "serve", "--hash-key", key}, work_dir + "/hash.out",
                                             work_dir + "/hash.err")
                      .out;
  while (!h.empty() && (h.back() == '\n' || h.back() == ' ')) h.pop_back();
  return h;
}

// A port free on loopback now (for servers that cannot take port 0: Redis, llama-server).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{60, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

inline bool send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body,
                                const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& [k, v] : headers) r += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST")
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

// Parses a complete response (read to EOF).
inline HttpResult parse_response(const std::string& raw) {
  HttpResult r;
  const size_t he = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || he == std::string::npos) return r;
  r.status = std::atoi(raw.c_str() + 9);
  std::istringstream hs(raw.substr(0, he));
  std::string line;
  std::getline(hs, line);
  while (std::getline(hs, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t c = line.find(':');
    if (c == std::string::npos) continue;
    std::string k = line.substr(0, c);
    for (char& ch : k) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    size_t v = c + 1;
    while (v < line.size() && line[v] == ' ') ++v;
    r.headers[k] = line.substr(v);
  }
  std::string body = raw.substr(he + 4);
  if (r.header("transfer-encoding") == "chunked") {
    std::string out;
    size_t p = 0;
    while (p < body.size()) {
      const size_t e = body.find("\r\n", p);
      if (e == std::string::npos) break;
      const size_t n = std::stoul(body.substr(p, e - p), nullptr, 16);
      if (n == 0) break;
      out += body.substr(e + 2, n);
      p = e + 2 + n + 2;
    }
    body = out;
  }
  r.body = body;
  return r;
}

inline HttpResult http(int port, const std::string& method, const std::string& path, const std::string& body = "",
                       const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, request_text(method, path, body, headers));
  std::string raw;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  return parse_response(raw);
}

// One request on an already open keep-alive connection (no "Connection: close"): reads
// exactly one response with a Content-Length body. status 0 when the connection closed.
inline HttpResult request_on(int fd, const std::string& method, const std::string& path, const std::string& body = "",
                             const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const auto& [k, v] : headers) r += k + ": " + v + "\r\n";
  if (!body.empty() || method == "POST")
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (!send_all(fd, r + "\r\n" + body)) return {};
  std::string raw;
  char buf[4096];
  size_t want = std::string::npos;
  while (want == std::string::npos || raw.size() < want) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return {};
    raw.append(buf, size_t(n));
    const size_t he = raw.find("\r\n\r\n");
    if (want == std::string::npos && he != std::string::npos) {
      const HttpResult head = parse_response(raw.substr(0, he + 4));
      want = he + 4 + size_t(std::atoll(head.header("content-length").c_str()));
    }
  }
  return parse_response(raw);
}

// A request whose response is read piecewise (streams, disconnects).
class OpenRequest {
 public:
  OpenRequest(int port, const std::string& method, const std::string& path, const std::string& body,
              const std::vector<std::pair<std::string, std::string>>& headers = {}) {
    fd_ = connect_to(port);
    if (fd_ >= 0) send_all(fd_, request_text(method, path, body, headers));
  }
  ~OpenRequest() { close(); }
  // Reads until `needle` appears in what was received (or EOF/timeout); true when found.
  bool read_until(const std::string& needle) {
    char buf[4096];
    while (raw_.find(needle) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return false;
      raw_.append(buf, size_t(n));
    }
    return true;
  }
  HttpResult finish() {
    read_until("\x01never\x02");
    close();
    return parse_response(raw_);
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  const std::string& raw() const { return raw_; }

 private:
  int fd_ = -1;
  std::string raw_;
};

// SSE events ("data: ..." or ": comment") of a de-chunked event-stream body.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> ev;
  size_t p = 0;
  while (p < body.size()) {
    const size_t e = body.find("\n\n", p);
    if (e == std::string::npos) break;
    ev.push_back(body.substr(p, e - p));
    p = e + 2;
  }
  return ev;
}

}  // namespace ts::testing_server
