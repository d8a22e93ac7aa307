// A deliberately slow OpenAI-compatible test server (tests only): streams SSE with known
// injected delays (TTFT per tier, a fixed time per token), a one-off stall that holds
// every first token until it ends, periodic 429s, explicit degradation, and an optional
// single slot so load beyond its capacity queues. The load tester's numbers are checked
// against these known delays.
#pragma once

// Tests configure the server with designated initializers that name only the delays
// they inject; every other field keeps its default on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ts::bench::testing {

class SlowServer {
 public:
  struct Config {
    double ttft_ms = 50;                      // default time to the first token
    std::map<std::string, double> tier_ttft_ms;  // per requested tier
    double per_token_ms = 10;                 // between tokens
    int stall_at = 0;                         // the n-th request (1-based) starts a stall
    double stall_ms = 0;                      // first tokens wait until the stall ends
    int every_nth_429 = 0;                    // every n-th request gets 429 + Retry-After
    int degrade_every_nth_ultrafast = 0;      // every n-th ultrafast request served as standard
    bool serial = false;                      // one request generates at a time
    bool report_queue = true;                 // add the tierserve extension object
    bool close_after_response = false;        // close keep-alive connections silently
                                              // after each response (an idle timeout)
  };

  explicit SlowServer(Config c) : cfg_(std::move(c)), acceptor_(io_) {
    namespace net = boost::asio;
    net::ip::tcp::endpoint ep(net::ip::address_v4::loopback(), 0);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(net::socket_base::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen(256);
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~SlowServer() {
    stop_ = true;
    // Wake the blocking accept with a connection of our own.
    try {
      boost::asio::io_context io;
      boost::asio::ip::tcp::socket s(io);
      s.connect({boost::asio::ip::address_v4::loopback(), port_});
    } catch (...) {
    }
    accept_thread_.join();
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& s : sockets_) {
        boost::system::error_code ec;
        s->shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
      }
    }
    for (auto& t : conn_threads_) t.join();
  }

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return count_.load(); }
  int max_concurrent() const { return max_cur_.load(); }
  int connections() const { return n_conns_.load(); }

 private:
  using Clock = std::chrono::steady_clock;

  void accept_loop() {
    for (;;) {
      auto sock = std::make_shared<boost::asio::ip::tcp::socket>(io_);
      boost::system::error_code ec;
      acceptor_.accept(*sock, ec);
      if (stop_ || ec) return;
      // Small SSE writes must leave at once (Nagle + delayed ACK would batch them).
      sock->set_option(boost::asio::ip::tcp::no_delay(true), ec);
      ++n_conns_;
      std::lock_guard<std::mutex> l(mu_);
      sockets_.push_back(sock);
      conn_threads_.emplace_back([this, sock] { serve(sock); });
    }
  }

  static void write_all(boost::asio::ip::tcp::socket& s, const std::string& data) {
    boost::system::error_code ec;
    boost::asio::write(s, boost::asio::buffer(data), ec);
  }
  static std::string chunk(const std::string& payload) {
    char len[16];
    std::snprintf(len, sizeof len, "%zx\r\n", payload.size());
    return len + payload + "\r\n";
  }

  void serve(std::shared_ptr<boost::asio::ip::tcp::socket> sock) {
    namespace http = boost::beast::http;
    boost::beast::flat_buffer buf;
    for (;;) {
      http::request<http::string_body> req;
      boost::system::error_code ec;
      http::read(*sock, buf, req, ec);
      if (ec || stop_) return;
      handle(*sock, req);
      if (cfg_.close_after_response) {
        boost::system::error_code ignored;
        sock->shutdown(boost::asio::ip::tcp::socket::shutdown_both, ignored);
        return;
      }
    }
  }

  void handle(boost::asio::ip::tcp::socket& s, const boost::beast::http::request<boost::beast::http::string_body>& req) {
    const int n = ++count_;
    const auto arrived = Clock::now();
    const nlohmann::json body = nlohmann::json::parse(req.body(), nullptr, false);
    const int max_tokens = body.value("max_tokens", 16);
    const bool stream = body.value("stream", false);
    const std::string tier = body.value("service_tier", std::string());
    const bool chat = req.target().find("chat") != boost::beast::string_view::npos;
    if (cfg_.every_nth_429 && n % cfg_.every_nth_429 == 0) {
      const std::string b = R"({"error":{"message":"rate limited","type":"rate_limit"}})";
      write_all(s, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: " +
                       std::to_string(b.size()) + "\r\n\r\n" + b);
      return;
    }
    std::string served = tier.empty() ? "standard" : tier, reason;
    if (tier == "ultrafast" && cfg_.degrade_every_nth_ultrafast) {
      const int k = ++n_ultrafast_;
      if (k % cfg_.degrade_every_nth_ultrafast == 0) {
        served = "standard";
        reason = "queue_timeout";
      }
    }
    const int cur = ++cur_;
    for (int m = max_cur_.load(); cur > m && !max_cur_.compare_exchange_weak(m, cur);) {
    }
    std::unique_lock<std::mutex> slot(slot_mu_, std::defer_lock);
    if (cfg_.serial) slot.lock();
    const auto started = Clock::now();
    if (n == cfg_.stall_at) stall_until_ns_ = (started + ms(cfg_.stall_ms)).time_since_epoch().count();
    double ttft = cfg_.ttft_ms;
    if (auto it = cfg_.tier_ttft_ms.find(tier); it != cfg_.tier_ttft_ms.end()) ttft = it->second;
    std::this_thread::sleep_for(ms(ttft));
    const Clock::time_point stall_end{Clock::duration(stall_until_ns_.load())};
    if (Clock::now() < stall_end) std::this_thread::sleep_until(stall_end);
    const double queue_ms = std::chrono::duration<double, std::milli>(started - arrived).count();

    nlohmann::json ext = {{"tier_requested", tier.empty() ? "standard" : tier}, {"tier_served", served},
                          {"queue_ms", queue_ms}, {"ttft_ms", ttft}, {"preemptions", 0}};
    if (!reason.empty()) ext["degraded_reason"] = reason;
    std::string headers = "x-tierserve-tier-requested: " + (tier.empty() ? std::string("standard") : tier) +
                          "\r\nx-tierserve-tier-served: " + served + "\r\n";
    if (!reason.empty()) headers += "x-tierserve-degraded-reason: " + reason + "\r\n";
    auto token_json = [&](int i) {
      const std::string text = " t" + std::to_string(i);
      return chat ? nlohmann::json{{"choices", {{{"index", 0}, {"delta", {{"content", text}}}}}}, {"service_tier", served}}
                  : nlohmann::json{{"choices", {{{"index", 0}, {"text", text}}}}, {"service_tier", served}};
    };
    if (stream) {
      write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n" + headers + "\r\n");
      write_all(s, chunk(": tierserve served=" + served + "\n\n"));
      for (int i = 0; i < max_tokens; ++i) {
        if (i) std::this_thread::sleep_for(ms(cfg_.per_token_ms));
        write_all(s, chunk("data: " + token_json(i).dump() + "\n\n"));
      }
      nlohmann::json last = {{"choices", {{{"index", 0}, {"delta", nlohmann::json::object()}, {"finish_reason", "length"}}}},
                             {"service_tier", served},
                             {"usage", {{"prompt_tokens", 3}, {"completion_tokens", max_tokens}}}};
      if (cfg_.report_queue) last["tierserve"] = ext;
      write_all(s, chunk("data: " + last.dump() + "\n\n") + chunk("data: [DONE]\n\n") + "0\r\n\r\n");
    } else {
      std::this_thread::sleep_for(ms(cfg_.per_token_ms * (max_tokens - 1)));
      nlohmann::json b = {{"choices", {{{"index", 0}, {"message", {{"role", "assistant"}, {"content", "x y"}}}, {"finish_reason", "length"}}}},
                          {"service_tier", served},
                          {"usage", {{"prompt_tokens", 3}, {"completion_tokens", max_tokens}}}};
      if (cfg_.report_queue) b["tierserve"] = ext;
      const std::string d = b.dump();
      write_all(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + headers +
                       "Content-Length: " + std::to_string(d.size()) + "\r\n\r\n" + d);
    }
    --cur_;
  }

  static std::chrono::nanoseconds ms(double v) { return std::chrono::nanoseconds(int64_t(v * 1e6)); }

  Config cfg_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::shared_ptr<boost::asio::ip::tcp::socket>> sockets_;
  std::vector<std::thread> conn_threads_;
  std::mutex slot_mu_;
  std::atomic<int> count_{0}, cur_{0}, max_cur_{0}, n_conns_{0}, n_ultrafast_{0};
  std::atomic<int64_t> stall_until_ns_{0};
};

}  // namespace ts::bench::testing
