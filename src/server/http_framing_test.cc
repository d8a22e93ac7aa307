// The request framer without sockets: every framing rule of http_framing.h, pipelining,
// byte-at-a-time feeding, and the limits.
#include "server/http_framing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ts::server {
namespace {

struct Outcome {
  std::vector<HttpRequest> requests;
  bool error = false;
  FramingError err;
  bool pending = false;  // bytes of an unfinished request are buffered
};

// Feeds `bytes` in pieces of `step` bytes, collecting requests until an error.
Outcome frame(const std::string& bytes, size_t step = 0, FramingLimits lim = {}) {
  RequestFramer f(lim);
  Outcome o;
  if (step == 0) step = bytes.size() ? bytes.size() : 1;
  for (size_t off = 0; off < bytes.size() && !o.error; off += step) {
    f.feed(std::string_view(bytes).substr(off, step));
    for (;;) {
      HttpRequest r;
      const auto n = f.next(&r, &o.err);
      if (n == RequestFramer::Next::kRequest) {
        o.requests.push_back(std::move(r));
        continue;
      }
      if (n == RequestFramer::Next::kError) o.error = true;
      break;
    }
  }
  o.pending = !o.error && f.in_request();
  return o;
}

const std::string kHost = "Host: h\r\n";

TEST(RequestFramer, ContentLengthBodiesAndPipelining) {
  const std::string two = "POST /a?x=1 HTTP/1.1\r\n" + kHost + "Content-Length: 3\r\n\r\nabc" + "GET /b HTTP/1.1\r\n" + kHost +
                          "X-Y: z\r\n\r\n";
  for (size_t step : {size_t(0), size_t(1), size_t(7)}) {
    Outcome o = frame(two, step);
    ASSERT_FALSE(o.error) << o.err.message;
    ASSERT_EQ(o.requests.size(), 2u) << "step " << step;
    EXPECT_EQ(o.requests[0].method, "POST");
    EXPECT_EQ(o.requests[0].path, "/a");
    EXPECT_EQ(o.requests[0].query, "x=1");
    EXPECT_EQ(o.requests[0].body, "abc");
    EXPECT_EQ(o.requests[1].path, "/b");
    EXPECT_EQ(o.requests[1].header("x-y"), "z");
    EXPECT_FALSE(o.pending);
  }
}

TEST(RequestFramer, EveryWayOfCuttingTheStreamGivesTheSameRequests) {
  // Heads split across reads, with consumed bytes compacted away between them (a head's
  // first line may be consumed before its last arrives: it must survive the compaction).
  const std::string stream = "POST /one HTTP/1.1\r\n" + kHost + "Content-Length: 5\r\n\r\nhello" +
                             "GET /two?q=" + std::string(300, 'x') + " HTTP/1.1\r\n" + kHost + "X-Long: " +
                             std::string(500, 'y') + "\r\n\r\n" + "POST /three HTTP/1.1\r\n" + kHost +
                             "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  for (size_t step = 1; step <= 64; ++step) {
    Outcome o = frame(stream, step);
    ASSERT_FALSE(o.error) << step << ": " << o.err.message;
    ASSERT_EQ(o.requests.size(), 3u) << step;
    EXPECT_EQ(o.requests[0].body, "hello");
    EXPECT_EQ(o.requests[1].header("x-long"), std::string(500, 'y'));
    EXPECT_EQ(o.requests[2].body, "abc");
  }
  // A bad second head is the same error however it arrives.
  const std::string bad = "GET / HTTP/1.1\r\n" + kHost + "\r\nGET / HTTP/1.1\r\n" + kHost + " folded\r\n\r\n";
  for (size_t step = 1; step <= 16; ++step) {
    Outcome o = frame(bad, step);
    EXPECT_EQ(o.requests.size(), 1u);
    ASSERT_TRUE(o.error) << step;
    EXPECT_EQ(o.err.code, "bad_request");
  }
}

TEST(RequestFramer, ChunkedBody) {
  Outcome o = frame("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n", 1);
  ASSERT_FALSE(o.error) << o.err.message;
  ASSERT_EQ(o.requests.size(), 1u);
  EXPECT_EQ(o.requests[0].body, "abcde");
}

TEST(RequestFramer, TransferEncodingThatDoesNotEndInChunkedIsRefusedBeforeItsBody) {
  // The smuggling case: the body must never be read as a second request.
  for (const char* te : {"gzip", "identity", "deflate", "chunked, gzip", "chunked;q=1", "", "x"}) {
    Outcome o = frame("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: " + te +
                      "\r\n\r\nGET /admin/stats HTTP/1.1\r\nHost: h\r\n\r\n");
    ASSERT_TRUE(o.error) << te;
    EXPECT_EQ(o.err.status, 400) << te;
    EXPECT_TRUE(o.requests.empty()) << te;
  }
  // Split across two headers: still the last coding that counts.
  Outcome o = frame("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n");
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.err.code, "bad_transfer_encoding");
}

TEST(RequestFramer, CodingsBeforeChunkedAreNotImplemented) {
  Outcome o = frame("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n");
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.err.status, 501);
  EXPECT_EQ(o.err.code, "unsupported_transfer_encoding");
  o = frame("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n");
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.err.status, 400);
}

TEST(RequestFramer, TransferEncodingWithContentLengthIsRefused) {
  for (const std::string order : {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                                  "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"}) {
    Outcome o = frame("POST / HTTP/1.1\r\n" + kHost + order + "\r\n0\r\n\r\n");
    ASSERT_TRUE(o.error) << order;
    EXPECT_EQ(o.err.status, 400);
    EXPECT_TRUE(o.err.code == "conflicting_framing" || o.err.code == "bad_transfer_encoding") << o.err.code;
  }
}

TEST(RequestFramer, BadContentLengths) {
  for (const char* cl : {"-1", "+5", "5 5", "0x10", "abc", "1,1", "99999999999999999999999"}) {
    Outcome o = frame("POST / HTTP/1.1\r\n" + kHost + "Content-Length: " + cl + "\r\n\r\n");
    ASSERT_TRUE(o.error) << cl;
    EXPECT_TRUE(o.err.status == 400 || o.err.status == 413) << cl << " " << o.err.status;
  }
  Outcome o = frame("POST / HTTP/1.1\r\n" + kHost + "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx");
  ASSERT_TRUE(o.error);
  EXPECT_EQ(o.err.code, "bad_content_length");
}

TEST(RequestFramer, HostVersionAndTarget) {
  EXPECT_EQ(frame("GET / HTTP/1.1\r\n\r\n").err.code, "bad_host");
  EXPECT_EQ(frame("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").err.code, "bad_host");
  EXPECT_EQ(frame("GET / HTTP/1.0\r\n\r\n").requests.size(), 1u);  // 1.0 needs no Host
  EXPECT_EQ(frame("GET / HTTP/2.0\r\n" + kHost + "\r\n").err.status, 505);
  EXPECT_EQ(frame("GET / HTTP/0.9\r\n" + kHost + "\r\n").err.status, 505);
  EXPECT_EQ(frame("GET admin HTTP/1.1\r\n" + kHost + "\r\n").err.code, "bad_target");
  EXPECT_EQ(frame("GET * HTTP/1.1\r\n" + kHost + "\r\n").err.code, "bad_target");
  EXPECT_EQ(frame("OPTIONS * HTTP/1.1\r\n" + kHost + "\r\n").requests.size(), 1u);
  Outcome o = frame("GET http://example.com:80/v1/models?x=1 HTTP/1.1\r\n" + kHost + "\r\n");
  ASSERT_EQ(o.requests.size(), 1u) << o.err.message;
  EXPECT_EQ(o.requests[0].path, "/v1/models");
  EXPECT_EQ(o.requests[0].query, "x=1");
  o = frame("GET http://example.com HTTP/1.1\r\n" + kHost + "\r\n");
  ASSERT_EQ(o.requests.size(), 1u);
  EXPECT_EQ(o.requests[0].path, "/");
}

TEST(RequestFramer, GarbageAndHeaderSyntax) {
  for (const std::string bad : {"\x01\x02\x03\r\n\r\n", "GET\r\n\r\n", "GET / HTTP/1.1 x\r\n\r\n", "GET / FTP/1.1\r\n\r\n",
                                "GET / HTTP/1.1\r\nHost h\r\n\r\n", "GET / HTTP/1.1\r\nHost : h\r\n\r\n",
                                "GET / HTTP/1.1\r\nHost: h\r\nX: a\x01z\r\n\r\n", "G T / HTTP/1.1\r\nHost: h\r\n\r\n"}) {
    Outcome o = frame(bad);
    ASSERT_TRUE(o.error) << bad;
    EXPECT_EQ(o.err.status, 400) << bad;
  }
}

TEST(RequestFramer, LimitsAndBadChunks) {
  FramingLimits lim;
  lim.max_header_bytes = 256;
  lim.max_body_bytes = 10;
  EXPECT_EQ(frame("GET / HTTP/1.1\r\n" + kHost + "X: " + std::string(400, 'a') + "\r\n\r\n", 0, lim).err.status, 431);
  // Oversized even before the head ends (fed a byte at a time).
  EXPECT_EQ(frame("GET / HTTP/1.1\r\n" + kHost + "X: " + std::string(400, 'a'), 1, lim).err.status, 431);
  EXPECT_EQ(frame("POST / HTTP/1.1\r\n" + kHost + "Content-Length: 11\r\n\r\n", 0, lim).err.status, 413);
  EXPECT_EQ(frame("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n6\r\nabcdef\r\n0\r\n\r\n", 0, lim)
                .err.status,
            413);
  for (const std::string chunk : {"zz\r\nab\r\n0\r\n\r\n", "2\r\nabc\r\n0\r\n\r\n", "2\nab\r\n0\r\n\r\n"}) {
    Outcome o = frame("POST / HTTP/1.1\r\n" + kHost + "Transfer-Encoding: chunked\r\n\r\n" + chunk);
    ASSERT_TRUE(o.error) << chunk;
    EXPECT_EQ(o.err.status, 400) << chunk;
  }
}

TEST(RequestFramer, ErrorAfterAGoodRequestIsReportedAfterIt) {
  Outcome o = frame("GET /ok HTTP/1.1\r\n" + kHost + "\r\nNOT HTTP AT ALL\r\n\r\n");
  ASSERT_EQ(o.requests.size(), 1u);
  EXPECT_TRUE(o.error);
  EXPECT_EQ(o.err.status, 400);
}

TEST(RequestFramer, PartialRequestIsPendingAndContinueIsAskedOnce) {
  RequestFramer f({});
  HttpRequest r;
  FramingError e;
  EXPECT_FALSE(f.in_request());
  f.feed("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  EXPECT_EQ(f.next(&r, &e), RequestFramer::Next::kNeedMore);
  EXPECT_TRUE(f.in_request());
  EXPECT_TRUE(f.wants_continue());
  f.clear_continue();
  EXPECT_FALSE(f.wants_continue());
  f.feed("ab");
  EXPECT_EQ(f.next(&r, &e), RequestFramer::Next::kNeedMore);
  f.feed("cde");
  ASSERT_EQ(f.next(&r, &e), RequestFramer::Next::kRequest);
  EXPECT_EQ(r.body, "abcde");
  EXPECT_FALSE(f.in_request());
  EXPECT_TRUE(f.keep_alive());
  // An error is sticky.
  f.feed("BAD\r\n\r\n");
  EXPECT_EQ(f.next(&r, &e), RequestFramer::Next::kError);
  f.feed("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(f.next(&r, &e), RequestFramer::Next::kError);
}

TEST(RequestFramer, KeepAliveFollowsVersionAndConnectionHeader) {
  RequestFramer f({});
  HttpRequest r;
  FramingError e;
  f.feed("GET / HTTP/1.0\r\n\r\n");
  ASSERT_EQ(f.next(&r, &e), RequestFramer::Next::kRequest);
  EXPECT_FALSE(f.keep_alive());
  EXPECT_TRUE(f.http10());
  f.feed("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(f.next(&r, &e), RequestFramer::Next::kRequest);
  EXPECT_FALSE(f.keep_alive());
  EXPECT_FALSE(f.http10());
}

}  // namespace
}  // namespace ts::server
