// The HTTP plumbing over real sockets with scripted handlers: framing, keep-alive,
// chunked streams, HTTP/1.0, 100-continue, and the disconnect hook.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "testing/server.h"

namespace ts::server {
namespace {

using testing_server::connect_to;

void send_str(int fd, const std::string& s) { ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size())); }

// Reads until `needle` is in the data (or EOF); returns everything read.
std::string read_until(int fd, const std::string& needle) {
  std::string out;
  char buf[4096];
  while (out.find(needle) == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

struct HttpServerTest : ::testing::Test {
  void start(Dispatch d, HttpServerOptions o = {}) {
    srv = std::make_unique<HttpServer>(o);
    auto p = srv->listen("127.0.0.1", 0, std::move(d));
    ASSERT_TRUE(p.is_ok()) << p.status().to_string();
    port = *p;
    srv->start(2);
  }
  void TearDown() override {
    if (srv) srv->stop();
  }
  std::unique_ptr<HttpServer> srv;
  int port = 0;
};

TEST(SerializeResponse, Golden) {
  HttpResponse r;
  r.status = 429;
  r.body = "{}";
  r.headers = {{"Retry-After", "3"}, {"X-Bad", "a\r\nInjected: 1"}};
  EXPECT_EQ(serialize_response(r, true, false),
            "HTTP/1.1 429 Too Many Requests\r\nServer: tierserve\r\nContent-Type: application/json\r\nRetry-After: 3\r\n"
            "X-Bad: aInjected: 1\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}");
  EXPECT_EQ(serialize_response(r, false, true).find("{}"), std::string::npos);  // HEAD: no body
}

TEST_F(HttpServerTest, KeepAliveAndBodies) {
  start([](const HttpRequest& req, std::shared_ptr<Responder> out) {
    HttpResponse r;
    r.content_type = "text/plain";
    r.body = req.method + " " + req.path + " q=" + req.query + " body=" + req.body + " h=" + std::string(req.header("x-a"));
    out->respond(std::move(r));
  });
  const int fd = connect_to(port);
  ASSERT_GE(fd, 0);
  send_str(fd, "POST /p?x=1 HTTP/1.1\r\nHost: h\r\nX-A: v\r\nContent-Length: 3\r\n\r\nabc");
  std::string a = read_until(fd, "body=abc h=v");
  EXPECT_NE(a.find("HTTP/1.1 200 OK"), std::string::npos) << a;
  EXPECT_NE(a.find("POST /p q=x=1 body=abc h=v"), std::string::npos) << a;
  // Same connection, chunked request body.
  send_str(fd, "POST /q HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n");
  std::string b = read_until(fd, "body=xy");
  EXPECT_NE(b.find("POST /q q= body=xy"), std::string::npos) << b;
  ::close(fd);
}

TEST_F(HttpServerTest, ChunkedStreamFromAnotherThread) {
  start([](const HttpRequest&, std::shared_ptr<Responder> out) {
    // Like the engine loop: answers later, from a thread of its own.
    std::thread([out] {
      HttpResponse h;
      h.content_type = "text/event-stream";
      out->start_stream(std::move(h));
      for (int i = 0; i < 3; ++i) out->send("data: " + std::to_string(i) + "\n\n");
      out->send("");  // empty sends are dropped (an empty chunk would end the body)
      out->end();
    }).detach();
  });
  const int fd = connect_to(port);
  send_str(fd, "GET /s HTTP/1.1\r\nHost: h\r\n\r\n");
  const std::string r = read_until(fd, "0\r\n\r\n");
  ::close(fd);
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"), std::string::npos) << r;
}

TEST_F(HttpServerTest, Http10StreamEndsWithClose) {
  start([](const HttpRequest&, std::shared_ptr<Responder> out) {
    out->start_stream(HttpResponse{});
    out->send("one");
    out->send("two");
    out->end();
  });
  const int fd = connect_to(port);
  send_str(fd, "GET / HTTP/1.0\r\n\r\n");
  const std::string r = read_until(fd, "\x01");  // to EOF
  ::close(fd);
  EXPECT_EQ(r.find("chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: close\r\n\r\nonetwo"), std::string::npos) << r;
}

TEST_F(HttpServerTest, ExpectContinue) {
  start([](const HttpRequest& req, std::shared_ptr<Responder> out) {
    HttpResponse r;
    r.body = "got " + std::to_string(req.body.size());
    out->respond(std::move(r));
  });
  const int fd = connect_to(port);
  send_str(fd, "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  const std::string c = read_until(fd, "\r\n\r\n");
  EXPECT_EQ(c, "HTTP/1.1 100 Continue\r\n\r\n");
  send_str(fd, "hello");
  EXPECT_NE(read_until(fd, "got 5").find("got 5"), std::string::npos);
  ::close(fd);
}

TEST_F(HttpServerTest, ClientGoneRunsTheDisconnectHookOnce) {
  std::atomic<int> hooks{0};
  std::shared_ptr<Responder> held;
  std::mutex mu;
  start([&](const HttpRequest&, std::shared_ptr<Responder> out) {
    out->on_disconnect([&] { hooks.fetch_add(1); });
    std::lock_guard<std::mutex> l(mu);
    held = out;  // never answers on its own
  });
  const int fd = connect_to(port);
  send_str(fd, "GET /wait HTTP/1.1\r\nHost: h\r\n\r\n");
  for (int i = 0; i < 500 && srv->in_flight() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(srv->in_flight(), 1);
  ::close(fd);
  for (int i = 0; i < 500 && hooks.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(hooks.load(), 1);
  EXPECT_EQ(srv->in_flight(), 0);
  // A late answer for the gone client is dropped quietly.
  std::lock_guard<std::mutex> l(mu);
  held->respond(HttpResponse{});
  held->on_disconnect([&] { hooks.fetch_add(1); });  // already gone: runs at once
  for (int i = 0; i < 500 && hooks.load() == 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(hooks.load(), 2);
}

TEST_F(HttpServerTest, LimitsAndTimeouts) {
  HttpServerOptions o;
  o.max_header_bytes = 1024;
  o.max_body_bytes = 100;
  o.read_timeout_ms = 200;
  o.idle_timeout_ms = 200;
  start([](const HttpRequest&, std::shared_ptr<Responder> out) { out->respond(HttpResponse{}); }, o);
  int fd = connect_to(port);
  send_str(fd, "GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(2000, 'a') + "\r\n\r\n");
  EXPECT_EQ(read_until(fd, "\r\n\r\n").rfind("HTTP/1.1 431", 0), 0u);
  ::close(fd);
  fd = connect_to(port);
  send_str(fd, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n");
  EXPECT_EQ(read_until(fd, "\r\n\r\n").rfind("HTTP/1.1 413", 0), 0u);
  ::close(fd);
  // A client that sends half a request and stalls is answered 408 after the read timeout,
  // and the connection closes.
  fd = connect_to(port);
  send_str(fd, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string timed_out = read_until(fd, "never");
  EXPECT_EQ(timed_out.rfind("HTTP/1.1 408", 0), 0u) << timed_out;
  EXPECT_NE(timed_out.find("request_timeout"), std::string::npos) << timed_out;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ::close(fd);
  // An idle connection (no byte of a request) is closed quietly after the idle timeout.
  fd = connect_to(port);
  EXPECT_EQ(read_until(fd, "never"), "");
  ::close(fd);
}

// Waits (bounded) until pred() holds; true if it did.
template <class F>
bool eventually(F pred) {
  for (int i = 0; i < 2500; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

// Sends one keep-alive request and reads its (body "ok") response.
bool ping(int fd) {
  const std::string req = "GET /ping HTTP/1.1\r\nHost: h\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) return false;
  const std::string r = read_until(fd, "\r\n\r\nok");
  return r.rfind("HTTP/1.1 200", 0) == 0 && r.find("\r\n\r\nok") != std::string::npos;
}

// A handler that answers every request 200 "ok" (text/plain).
void answer_ok(const HttpRequest&, std::shared_ptr<Responder> out) {
  HttpResponse r;
  r.content_type = "text/plain";
  r.body = "ok";
  out->respond(std::move(r));
}

TEST_F(HttpServerTest, ConnectionLimitAnswers503AndFreesSlotsOnClose) {
  HttpServerOptions o;
  o.max_connections = 2;
  start(answer_ok, o);
  // An admin-style listener is neither limited nor counted.
  auto admin = srv->listen("127.0.0.1", 0, answer_ok, /*limit_connections=*/false);
  ASSERT_TRUE(admin.is_ok());
  EXPECT_EQ(srv->connection_stats().max, 2);

  const int a = connect_to(port), b = connect_to(port);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  ASSERT_TRUE(ping(a));
  ASSERT_TRUE(ping(b));
  EXPECT_EQ(srv->connection_stats().open, 2);

  // The third: 503 with Retry-After and an OpenAI error, then the server closes it.
  int c = connect_to(port);
  ASSERT_GE(c, 0);
  send_str(c, "GET /ping HTTP/1.1\r\nHost: h\r\n\r\n");
  const std::string refused = read_until(c, "\x01");  // to EOF: the server closes it
  ::close(c);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1\r\n"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Connection: close\r\n"), std::string::npos) << refused;
  EXPECT_NE(refused.find(R"("type":"server_error")"), std::string::npos) << refused;
  EXPECT_NE(refused.find(R"("code":"overloaded")"), std::string::npos) << refused;
  EXPECT_NE(refused.find("limit of 2 open connections"), std::string::npos) << refused;
  EXPECT_EQ(srv->connection_stats().rejected, 1u);
  EXPECT_EQ(srv->connection_stats().open, 2);

  // A refused client that sends a body it never gets to finish still reads its 503.
  c = connect_to(port);
  send_str(c, "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n" + std::string(50000, 'z'));
  EXPECT_EQ(read_until(c, "\r\n\r\n").rfind("HTTP/1.1 503", 0), 0u);
  ::close(c);

  // The open connections were not disturbed, and the unlimited listener still answers.
  EXPECT_TRUE(ping(a));
  const int d = connect_to(*admin);
  ASSERT_GE(d, 0);
  EXPECT_TRUE(ping(d));
  ::close(d);
  EXPECT_EQ(srv->connection_stats().open, 2);

  // A client that vanishes with a reset (SO_LINGER 0) frees its slot; a new one gets in.
  linger lg{1, 0};
  ::setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(a);
  EXPECT_TRUE(eventually([&] { return srv->connection_stats().open == 1; })) << srv->connection_stats().open;
  const int e = connect_to(port);
  ASSERT_GE(e, 0);
  EXPECT_TRUE(ping(e));
  // A plain close frees a slot too.
  ::close(b);
  ::close(e);
  EXPECT_TRUE(eventually([&] { return srv->connection_stats().open == 0; })) << srv->connection_stats().open;
  EXPECT_EQ(srv->connection_stats().rejected, 2u);
}

TEST_F(HttpServerTest, ZeroMaxConnectionsIsUnlimited) {
  HttpServerOptions o;
  o.max_connections = 0;
  start(answer_ok, o);
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    fds.push_back(connect_to(port));
    ASSERT_GE(fds.back(), 0);
    ASSERT_TRUE(ping(fds.back())) << i;
  }
  EXPECT_EQ(srv->connection_stats().open, 20);
  EXPECT_EQ(srv->connection_stats().rejected, 0u);
  for (int fd : fds) ::close(fd);
  EXPECT_TRUE(eventually([&] { return srv->connection_stats().open == 0; }));
}

TEST_F(HttpServerTest, StopAcceptingClosesTheListener) {
  start([](const HttpRequest&, std::shared_ptr<Responder> out) { out->respond(HttpResponse{}); });
  srv->stop_accepting();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(connect_to(port), -1);
}

}  // namespace
}  // namespace ts::server
