// The gateway's client to its workers against a real loopback server: a call cancelled while
// the worker is still streaming ends once, with kCancelled, nothing after it, and its
// connection closed (the worker sees the client go); a whole response leaves its connection
// for the next call. Built with ASan by scripts/fuzz.sh as well: a cancel used to free the
// connection while its read was pending, which the completion then wrote into (the gateway
// crashed when a client left a borrowed stream).
#include "gateway/upstream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ts::gateway {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// A worker on 127.0.0.1, port 0, a thread per connection. "/stream" answers chunked events
// every 2 ms until the client goes; anything else a whole 2-byte body, keep-alive.
class LoopbackWorker {
 public:
  LoopbackWorker() : acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }
  ~LoopbackWorker() {
    stopping_ = true;
    {  // wake the blocking accept
      asio::io_context io;
      tcp::socket s(io);
      boost::system::error_code ec;
      s.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
    }
    accept_thread_.join();
    for (auto& t : conns_) t.join();
  }
  unsigned short port() const { return port_; }
  int accepted() const { return accepted_.load(); }
  int streams_ended_by_client() const { return gone_.load(); }

 private:
  void accept_loop() {
    for (;;) {
      tcp::socket s(io_);
      boost::system::error_code ec;
      acceptor_.accept(s, ec);
      if (stopping_ || ec) return;
      ++accepted_;
      conns_.emplace_back([this, s = std::move(s)]() mutable { serve(std::move(s)); });
    }
  }
  void serve(tcp::socket s) {
    asio::streambuf in;
    boost::system::error_code ec;
    for (;;) {
      const size_t head = asio::read_until(s, in, "\r\n\r\n", ec);
      if (ec) return;
      std::string h(asio::buffers_begin(in.data()), asio::buffers_begin(in.data()) + std::ptrdiff_t(head));
      in.consume(head);
      size_t len = 0;
      if (const size_t p = h.find("Content-Length: "); p != std::string::npos) len = std::stoul(h.substr(p + 16));
      if (in.size() < len) asio::read(s, in, asio::transfer_exactly(len - in.size()), ec);
      if (ec) return;
      in.consume(len);
      if (h.find(" /stream ") == std::string::npos) {
        asio::write(s, asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")), ec);
        if (ec) return;
        continue;
      }
      asio::write(s, asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")), ec);
      while (!ec && !stopping_) {
        asio::write(s, asio::buffer(std::string("a\r\ndata: {}\n\n\r\n")), ec);  // one 10-byte event
        std::this_thread::sleep_for(2ms);
      }
      if (ec) ++gone_;
      return;
    }
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0}, gone_{0};
  std::thread accept_thread_;
  std::vector<std::thread> conns_;  // joined at the end (a test's handful)
};

// What one call's handlers saw.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  int heads = 0, data = 0, data_after_end = 0, ends = 0;
  UpstreamError error = UpstreamError::kNone;

  UpstreamHandlers handlers() {
    UpstreamHandlers h;
    h.on_head = [this](int, const server::Headers&) {
      std::lock_guard<std::mutex> lk(mu);
      ++heads;
    };
    h.on_data = [this](std::string_view) {
      std::lock_guard<std::mutex> lk(mu);
      ++data;
      if (ends) ++data_after_end;
      cv.notify_all();
    };
    h.on_end = [this](UpstreamError e, const std::string&) {
      std::lock_guard<std::mutex> lk(mu);
      ++ends;
      error = e;
      cv.notify_all();
    };
    return h;
  }
  bool wait(const std::function<bool()>& pred) {
    std::unique_lock<std::mutex> lk(mu);
    return cv.wait_for(lk, 10s, pred);
  }
};

class Upstream : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = UpstreamPool::create(io_, HostPort{"127.0.0.1", std::to_string(worker_.port())}, UpstreamConfig{});
    ASSERT_TRUE(p.is_ok());
    pool_ = *p;
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });  // as the gateway runs it
  }
  void TearDown() override {
    work_.reset();
    pool_->close_idle();
    for (auto& t : threads_) t.join();
  }
  static UpstreamRequest request(const std::string& path) {
    UpstreamRequest r;
    r.path = path;
    r.body = "{\"stream\":true}";
    return r;
  }

  LoopbackWorker worker_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  std::shared_ptr<UpstreamPool> pool_;
  std::vector<std::thread> threads_;
};

TEST_F(Upstream, ACancelMidStreamEndsOnceAndTheWorkerSeesTheClientGo) {
  constexpr int kCalls = 24;
  for (int i = 0; i < kCalls; ++i) {
    Seen seen;
    std::shared_ptr<UpstreamCall> call = pool_->send(request("/stream"), seen.handlers());
    ASSERT_TRUE(seen.wait([&] { return seen.data >= 2; })) << "call " << i;
    call->cancel();  // a read is pending: the worker writes every 2 ms
    ASSERT_TRUE(seen.wait([&] { return seen.ends > 0; })) << "call " << i;
    call->cancel();  // after the end: no effect
    std::this_thread::sleep_for(10ms);
    std::lock_guard<std::mutex> lk(seen.mu);
    EXPECT_EQ(seen.heads, 1);
    EXPECT_EQ(seen.ends, 1);
    EXPECT_EQ(seen.error, UpstreamError::kCancelled);
    EXPECT_EQ(seen.data_after_end, 0);
  }
  // Every cancelled stream's connection was closed, none reused.
  for (int i = 0; i < 500 && worker_.streams_ended_by_client() < kCalls; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(worker_.streams_ended_by_client(), kCalls);
  EXPECT_EQ(worker_.accepted(), kCalls);
}

TEST_F(Upstream, ACancelBeforeTheConnectionEndsTheCallAndAWholeAnswerKeepsItsConnection) {
  for (int i = 0; i < 8; ++i) {
    Seen seen;
    pool_->send(request("/stream"), seen.handlers())->cancel();  // at once: maybe before the connect
    ASSERT_TRUE(seen.wait([&] { return seen.ends > 0; }));
    std::this_thread::sleep_for(5ms);
    std::lock_guard<std::mutex> lk(seen.mu);
    EXPECT_EQ(seen.ends, 1);
    EXPECT_EQ(seen.error, UpstreamError::kCancelled);
  }
  const int before = worker_.accepted();
  for (int i = 0; i < 5; ++i) {
    Seen seen;
    auto call = pool_->send(request("/whole"), seen.handlers());
    ASSERT_TRUE(seen.wait([&] { return seen.ends > 0; }));
    std::lock_guard<std::mutex> lk(seen.mu);
    EXPECT_EQ(seen.error, UpstreamError::kNone);
    EXPECT_EQ(seen.heads, 1);
  }
  EXPECT_EQ(worker_.accepted() - before, 1);  // one connection, kept alive for all five
}

}  // namespace
}  // namespace ts::gateway
