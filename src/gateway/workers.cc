#include "gateway/workers.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/log.h"

namespace ts::gateway {

namespace asio = boost::asio;

WorkerLoad parse_worker_metrics(std::string_view text) {
  WorkerLoad l;
  l.up = true;
  auto value_of = [&](std::string_view name) -> double {
    // "name value" or "name{labels} value" at the start of a line.
    for (size_t pos = 0; pos < text.size();) {
      size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(pos, end - pos);
      pos = end + 1;
      if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
      size_t at = name.size();
      if (line[at] == '{') {
        const size_t close = line.find('}', at);
        if (close == std::string_view::npos) continue;
        at = close + 1;
      }
      if (at >= line.size() || line[at] != ' ') continue;
      const std::string v(line.substr(at + 1));
      char* e = nullptr;
      const double d = std::strtod(v.c_str(), &e);
      if (e != v.c_str() && std::isfinite(d)) return d;
    }
    return -1;
  };
  auto first = [&](std::initializer_list<std::string_view> names) {
    for (std::string_view n : names)
      if (const double v = value_of(n); v >= 0) return v;
    return 0.0;
  };
  l.waiting = first({"tierserve_num_requests_waiting", "vllm:num_requests_waiting", "llamacpp:requests_deferred"});
  l.running = first({"tierserve_num_requests_running", "vllm:num_requests_running", "llamacpp:requests_processing"});
  // vLLM's "perc" gauges are fractions (0..1); gpu_cache_usage_perc is the name before v1.
  l.kv_usage = std::clamp(first({"tierserve_kv_cache_usage_ratio", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                                 "llamacpp:kv_cache_usage_ratio"}),
                          0.0, 1.0);
  return l;
}

struct WorkerSet::W {
  explicit W(asio::io_context& io) : timer(io) {}
  WorkerConfig cfg;
  std::shared_ptr<UpstreamPool> pool;  // GUARDED_BY(mu_)
  std::string url;                     // GUARDED_BY(mu_)
  asio::steady_timer timer;
  bool up = false;                     // GUARDED_BY(mu_)
  int64_t n_checks = 0;
  WorkerLoad load;
  // Local workers (the supervisor thread's, and mu_ for info()).
  pid_t pid = 0;
  std::string port_file, log_file;
  int64_t restarts = 0, health_failures = 0;
  int64_t backoff_ms = 500;
  std::chrono::steady_clock::time_point started, restart_at;
  bool waiting_port = false;
  std::string last_error;
};

WorkerSet::WorkerSet(const GatewayConfig& cfg, asio::io_context& io, Fleet& fleet, std::string serve_binary,
                     std::string work_dir)
    : cfg_(cfg), io_(io), fleet_(fleet), serve_binary_(std::move(serve_binary)), work_dir_(std::move(work_dir)) {
  for (const WorkerConfig& wc : cfg_.workers) {
    auto w = std::make_unique<W>(io_);
    w->cfg = wc;
    if (wc.kind == WorkerKind::kLocal) {
      w->port_file = work_dir_ + "/" + wc.name + ".port";
      w->log_file = work_dir_ + "/" + wc.name + ".log";
    } else {
      w->url = wc.url;
    }
    w_.push_back(std::move(w));
  }
}

WorkerSet::~WorkerSet() { stop(0); }

Status WorkerSet::start() {
  for (size_t i = 0; i < w_.size(); ++i) {
    W& w = *w_[i];
    if (w.cfg.kind != WorkerKind::kLocal) {
      auto hp = parse_http_url(w.cfg.url);
      if (!hp.is_ok()) return hp.status();
      auto p = UpstreamPool::create(io_, *hp, cfg_.upstream);
      if (!p.is_ok()) return invalid_argument("worker " + w.cfg.name + ": " + p.status().message());
      std::lock_guard<std::mutex> lk(mu_);
      w.pool = *p;
    } else if (!spawn(int(i))) {
      return internal_error("worker " + w.cfg.name + ": cannot start " + serve_binary_ + ": " + w.last_error);
    }
    schedule_check(int(i), 0);
  }
  supervisor_ = std::thread([this] { supervise(); });
  return Status::ok();
}

bool WorkerSet::spawn(int i) {
  W& w = *w_[size_t(i)];
  ::unlink(w.port_file.c_str());
  int threads = w.cfg.threads;
  if (threads == 0) {  // an equal share of the cores among the local workers
    int n_local = 0;
    for (const auto& o : w_) n_local += o->cfg.kind == WorkerKind::kLocal;
    threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, n_local));
  }
  std::vector<std::string> args = {serve_binary_, "serve", "-m", w.cfg.path, "-t", std::to_string(threads),
                                   "--host", "127.0.0.1", "--port", "0", "--port-file", w.port_file,
                                   "--served-model-name", w.cfg.served_as(), "--log-format", cfg_.log.format};
  for (const auto& a : w.cfg.args) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = ::open(w.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    w.last_error = "cannot open " + w.log_file;
    return false;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log_fd);
    w.last_error = "fork failed";
    return false;
  }
  if (pid == 0) {
    // The child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  std::lock_guard<std::mutex> lk(mu_);
  w.pid = pid;
  w.started = std::chrono::steady_clock::now();
  w.waiting_port = true;
  w.pool.reset();
  w.url.clear();
  log_record(LogLevel::kInfo, "worker started", {{"worker", w.cfg.name}, {"pid", int64_t(pid)}, {"model", w.cfg.path}});
  return true;
}

void WorkerSet::supervise() {
  while (!stopping_.load()) {
    for (size_t i = 0; i < w_.size(); ++i) {
      W& w = *w_[i];
      if (w.cfg.kind != WorkerKind::kLocal) continue;
      const auto now = std::chrono::steady_clock::now();
      pid_t pid;
      {
        std::lock_guard<std::mutex> lk(mu_);
        pid = w.pid;
      }
      if (pid > 0) {
        int status = 0;
        const pid_t r = ::waitpid(pid, &status, WNOHANG);
        if (r == pid) {
          const std::string how = WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                                    : "killed by signal " + std::to_string(WTERMSIG(status));
          {
            std::lock_guard<std::mutex> lk(mu_);
            w.pid = 0;
            w.last_error = how;
            w.pool.reset();
            w.url.clear();
            if (now - w.started > std::chrono::seconds(60)) w.backoff_ms = 500;
            w.restart_at = now + std::chrono::milliseconds(w.backoff_ms);
            w.backoff_ms = std::min<int64_t>(w.backoff_ms * 2, 30000);
          }
          log_record(LogLevel::kWarn, "worker exited", {{"worker", w.cfg.name}, {"how", how}});
          asio::post(io_, [this, i, how] { set_up(int(i), false, true, "the process " + how); });
          continue;
        }
        std::string port;
        {
          std::lock_guard<std::mutex> lk(mu_);
          if (!w.waiting_port) continue;
        }
        std::ifstream in(w.port_file);
        if (!(in >> port)) continue;
        auto p = UpstreamPool::create(io_, HostPort{"127.0.0.1", port}, cfg_.upstream);
        std::lock_guard<std::mutex> lk(mu_);
        w.waiting_port = false;
        if (p.is_ok()) {
          w.pool = *p;
          w.url = "http://127.0.0.1:" + port;
        }
      } else {
        bool due;
        {
          std::lock_guard<std::mutex> lk(mu_);
          due = now >= w.restart_at;
        }
        if (due && spawn(int(i))) {
          std::lock_guard<std::mutex> lk(mu_);
          ++w.restarts;
          if (on_restart) on_restart(int(i));
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void WorkerSet::schedule_check(int i, int64_t delay_ms) {
  W& w = *w_[size_t(i)];
  w.timer.expires_after(std::chrono::milliseconds(delay_ms));
  w.timer.async_wait([this, i](const boost::system::error_code& ec) {
    if (ec || stopping_.load()) return;
    check(i);
  });
}

void WorkerSet::check(int i) {
  W& w = *w_[size_t(i)];
  std::shared_ptr<UpstreamPool> pool;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pool = w.pool;
  }
  if (!pool) {
    set_up(i, false, false, "not started yet");
    schedule_check(i, cfg_.health.interval_ms);
    return;
  }
  const bool want_metrics = w.n_checks++ % 4 == 0;
  UpstreamRequest req;
  req.method = "GET";
  req.path = w.cfg.kind == WorkerKind::kLocal || w.cfg.kind == WorkerKind::kTierserve ? "/health/ready" : "/health";
  req.head_timeout_ms = cfg_.health.timeout_ms;
  if (!w.cfg.api_key.empty()) req.headers.emplace_back("authorization", "Bearer " + w.cfg.api_key);
  auto status = std::make_shared<int>(0);
  UpstreamHandlers h;
  h.on_head = [status](int s, const server::Headers&) { *status = s; };
  h.on_end = [this, i, status, want_metrics, pool](UpstreamError e, const std::string& detail) {
    if (stopping_.load()) return;
    if (e != UpstreamError::kNone) {
      set_up(i, false, e == UpstreamError::kConnect || e == UpstreamError::kTimeout,
             "health check: " + std::string(upstream_error_name(e)) + " (" + detail + ")");
    } else if (*status != 200) {
      set_up(i, false, false, "health check: HTTP " + std::to_string(*status));
    } else {
      set_up(i, true, false, "");
      if (want_metrics) {
        UpstreamRequest m;
        m.method = "GET";
        m.path = "/metrics";
        m.head_timeout_ms = cfg_.health.timeout_ms;
        if (!w_[size_t(i)]->cfg.api_key.empty()) m.headers.emplace_back("authorization", "Bearer " + w_[size_t(i)]->cfg.api_key);
        auto body = std::make_shared<std::string>();
        auto mstatus = std::make_shared<int>(0);
        UpstreamHandlers mh;
        mh.on_head = [mstatus](int s, const server::Headers&) { *mstatus = s; };
        mh.on_data = [body](std::string_view d) {
          if (body->size() < (8u << 20)) body->append(d);
        };
        mh.on_end = [this, i, body, mstatus](UpstreamError e, const std::string&) {
          if (e != UpstreamError::kNone || *mstatus != 200 || stopping_.load()) return;
          WorkerLoad l = parse_worker_metrics(*body);
          bool up;
          {
            std::lock_guard<std::mutex> lk(mu_);
            up = w_[size_t(i)]->up;
            w_[size_t(i)]->load = l;
          }
          l.up = up;
          fleet_.set_load(i, l);
        };
        pool->send(std::move(m), std::move(mh));
      }
    }
    schedule_check(i, cfg_.health.interval_ms);
  };
  pool->send(std::move(req), std::move(h));
}

void WorkerSet::set_up(int i, bool up, bool unreachable, const std::string& why) {
  W& w = *w_[size_t(i)];
  bool changed;
  WorkerLoad l;
  {
    std::lock_guard<std::mutex> lk(mu_);
    changed = w.up != up;
    w.up = up;
    if (!up) {
      w.last_error = why;
      ++w.health_failures;
    }
    l = w.load;
  }
  l.up = up;
  if (changed) {
    fleet_.set_load(i, l);
    log_record(up ? LogLevel::kInfo : LogLevel::kWarn, up ? "worker up" : "worker down",
               {{"worker", w.cfg.name}, {"reason", up ? std::string("ready") : why}});
    if (on_health) on_health(i, up);
  }
  if (!up && unreachable && on_unreachable) on_unreachable(i);
}

void WorkerSet::report_failure(int i) {
  asio::post(io_, [this, i] {
    if (stopping_.load()) return;
    w_[size_t(i)]->timer.cancel();
    check(i);
  });
}

std::shared_ptr<UpstreamPool> WorkerSet::pool(int worker) const {
  std::lock_guard<std::mutex> lk(mu_);
  return w_[size_t(worker)]->pool;
}

std::vector<WorkerSet::Info> WorkerSet::info() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<Info> out;
  for (const auto& w : w_) {
    Info i;
    i.name = w->cfg.name;
    i.kind = std::string(worker_kind_name(w->cfg.kind));
    i.model = w->cfg.model;
    i.pool = w->cfg.pool;
    i.url = w->url;
    i.up = w->up;
    i.pid = w->pid;
    i.restarts = w->restarts;
    i.health_failures = w->health_failures;
    i.last_error = w->last_error;
    i.load = w->load;
    out.push_back(std::move(i));
  }
  return out;
}

void WorkerSet::stop(int64_t drain_ms) {
  if (stopping_.exchange(true)) return;
  if (supervisor_.joinable()) supervisor_.join();
  for (auto& w : w_) {
    boost::system::error_code ignored;
    w->timer.cancel();
  }
  std::vector<pid_t> pids;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& w : w_)
      if (w->pid > 0) pids.push_back(w->pid);
  }
  for (pid_t p : pids) ::kill(p, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(drain_ms + 2000);
  for (pid_t p : pids) {
    for (;;) {
      int st = 0;
      const pid_t r = ::waitpid(p, &st, WNOHANG);
      if (r == p || r < 0) break;
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(p, SIGKILL);
        ::waitpid(p, &st, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& w : w_) w->pid = 0;
}

}  // namespace ts::gateway
