// The server's robustness suite: over 300 distinct malformed requests (HTTP framing,
// headers, JSON, OpenAI fields, UTF-8, routes) sent to the real binary over raw sockets,
// each expecting a specific status and error code in OpenAI's error shape
// ({"error": {"message", "type", "param", "code"}}), with the server alive after each.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>

#include "testing/server.h"

namespace ts {
namespace {

using json = nlohmann::json;
using namespace ts::testing_server;

const std::string kStories = std::string(TS_SHARED_DIR) + "/models/stories260K.gguf";
const std::string kWork = std::string(TS_BINARY_DIR) + "/http_robustness_test";

struct Case {
  std::string name;   // what is wrong, for the failure message
  std::string bytes;  // the whole request stream
  int status;
  std::string code;   // the error body's "code"
};

const std::string kHead = "Host: x\r\nConnection: close\r\n";

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\n" + kHead + "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

std::vector<Case> framing_cases() {
  std::vector<Case> c;
  auto bad = [&](std::string name, std::string bytes, int status, std::string code) {
    c.push_back({"framing: " + std::move(name), std::move(bytes), status, std::move(code)});
  };
  // Request lines that are not HTTP.
  const std::vector<std::string> lines = {
      "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  // a TLS ClientHello
      "GET",
      "GET /",
      "GET / HTTP/1.1 extra",
      " GET / HTTP/1.1",
      "GET  / HTTP/1.1",
      "GET / http/1.1",
      "GET / HTTP/1",
      "GET / HTTP/1.1.1",
      "GET / HTTP/11",
      "GET / HTTP/a.b",
      "GET / HTTPS/1.1",
      "G@T / HTTP/1.1",
      "GET /a b HTTP/1.1",
      "GET /\x7f HTTP/1.1",
      "GET /\x01 HTTP/1.1",
      "GET\t/ HTTP/1.1",
      "GET / HTTP/1.1\t",
      "(GET) / HTTP/1.1",
      "GET{ / HTTP/1.1",
      "PRI * HTTP/2.0\r\n\r\nSM",
      "\x00\x00\x00\x04\x01\x00\x00\x00\x00",
      "GET / HTTP/1.1 ",
      "/ HTTP/1.1",
      "GET HTTP/1.1",
  };
  for (size_t i = 0; i < lines.size(); ++i)
    bad("request line " + std::to_string(i), lines[i] + "\r\n" + kHead + "\r\n", lines[i].rfind("PRI", 0) == 0 ? 505 : 400,
        lines[i].rfind("PRI", 0) == 0 ? "http_version_not_supported" : "bad_request");
  for (const char* v : {"HTTP/2.0", "HTTP/3.0", "HTTP/0.9", "HTTP/9.9", "HTTP/2.1"})
    bad(std::string("version ") + v, std::string("GET / ") + v + "\r\n" + kHead + "\r\n", 505, "http_version_not_supported");
  for (const char* t : {"admin", "*", "?x=1", "ftp://x/", "v1/models", "%2Fv1", "http:/x", "\\v1\\models"})
    bad(std::string("target ") + t, std::string("GET ") + t + " HTTP/1.1\r\n" + kHead + "\r\n", 400, "bad_target");
  bad("no Host", "GET /health/live HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "bad_host");
  bad("two Hosts", "GET /health/live HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", 400, "bad_host");
  bad("two Hosts, cases", "GET /health/live HTTP/1.1\r\nHost: a\r\nhOsT: a\r\nConnection: close\r\n\r\n", 400, "bad_host");
  // Header field syntax.
  const std::vector<std::string> fields = {
      "X-A : b",     "X-A\t: b",  "X A: b",       ": b",          "X-\x01: b",   "X-A: b\x01",  std::string("X-A: b\0c", 8),
      "NoColon",     "X-A:\rb",   "[X]: b",       "X-A\x7f: b",   "X(A): b",     "X@A: b",      "X,A: b",
      "X-A: b\x7f",  "\"X\": b",  "X-A: b\rX-B: c", "X/A: b",     "X=A: b",      "X{A}: b",
  };
  for (size_t i = 0; i < fields.size(); ++i)
    bad("header field " + std::to_string(i), "GET /health/live HTTP/1.1\r\n" + kHead + fields[i] + "\r\n\r\n", 400, "bad_request");
  bad("obs-fold", "GET /health/live HTTP/1.1\r\n" + kHead + "X-A: b\r\n c\r\n\r\n", 400, "bad_request");
  bad("header before a fold", "GET /health/live HTTP/1.1\r\n X-A: b\r\n" + kHead + "\r\n", 400, "bad_request");
  // Transfer-Encoding that cannot frame a request (the smuggling vector).
  for (const char* te : {"gzip", "identity", "deflate", "compress", "br", "chunked, gzip", "chunked,identity", "gzip;q=1",
                         "xchunked", "chunked-false", "\"chunked\"", "chunked;ext=1", "chunk", ","})
    bad(std::string("transfer-encoding '") + te + "'",
        std::string("POST /v1/completions HTTP/1.1\r\n") + kHead + "Transfer-Encoding: " + te +
            "\r\n\r\nGET /admin/stats HTTP/1.1\r\nHost: x\r\n\r\n",
        400, "bad_transfer_encoding");
  bad("transfer-encoding split over headers",
      "POST /v1/completions HTTP/1.1\r\n" + kHead + "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n0\r\n\r\n", 400,
      "bad_transfer_encoding");
  bad("chunked twice", "POST /v1/completions HTTP/1.1\r\n" + kHead + "Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400,
      "bad_transfer_encoding");
  bad("transfer-encoding in HTTP/1.0", "POST /v1/completions HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
      "bad_transfer_encoding");
  for (const char* te : {"gzip, chunked", "deflate, chunked", "identity, chunked", "br, chunked"})
    bad(std::string("transfer-encoding '") + te + "'",
        std::string("POST /v1/completions HTTP/1.1\r\n") + kHead + "Transfer-Encoding: " + te + "\r\n\r\n0\r\n\r\n", 501,
        "unsupported_transfer_encoding");
  bad("content-length then transfer-encoding",
      "POST /v1/completions HTTP/1.1\r\n" + kHead + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
      "conflicting_framing");
  bad("transfer-encoding then content-length",
      "POST /v1/completions HTTP/1.1\r\n" + kHead + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400,
      "conflicting_framing");
  // Content-Length values.
  for (const char* cl : {"-1", "+1", "1.0", "0x1", "1 2", "abc", "1,1", "2,3", "1e3", "\"1\"", "one", "-0",
                         "99999999999999999999999999"})
    bad(std::string("content-length '") + cl + "'",
        std::string("POST /v1/completions HTTP/1.1\r\n") + kHead + "Content-Length: " + cl + "\r\n\r\n{}", 400,
        "bad_content_length");
  bad("two content-lengths", "POST /v1/completions HTTP/1.1\r\n" + kHead + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400,
      "bad_content_length");
  bad("two equal content-lengths",
      "POST /v1/completions HTTP/1.1\r\n" + kHead + "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400, "bad_content_length");
  // Chunked bodies.
  const std::vector<std::string> chunks = {
      "zz\r\nab\r\n0\r\n\r\n", "-1\r\nab\r\n0\r\n\r\n", "2\r\nabc\r\n0\r\n\r\n", "2\r\nab" "X\r\n0\r\n\r\n",
      "0x2\r\nab\r\n0\r\n\r\n", "2;\x01\r\nab\r\n0\r\n\r\n", "ffffffffffffffffffff\r\nab\r\n0\r\n\r\n", "2 x\r\nab\r\n0\r\n\r\n",
      "\r\nab\r\n0\r\n\r\n", "2\rab\r\n0\r\n\r\n", "0\r\nbad trailer\r\n\r\n", "g\r\n",
  };
  for (size_t i = 0; i < chunks.size(); ++i)
    bad("chunk " + std::to_string(i),
        "POST /v1/completions HTTP/1.1\r\n" + kHead + "Transfer-Encoding: chunked\r\n\r\n" + chunks[i], 400,
        "bad_chunk");
  // Sizes over the limits (header 4096 bytes, body 16384).
  bad("one long header", "GET /health/live HTTP/1.1\r\n" + kHead + "X-F: " + std::string(5000, 'a') + "\r\n\r\n", 431,
      "header_too_large");
  bad("many headers", [&] {
    std::string s = "GET /health/live HTTP/1.1\r\n" + kHead;
    for (int i = 0; i < 700; ++i) s += "X-" + std::to_string(i) + ": y\r\n";
    return s + "\r\n";
  }(), 431, "header_too_large");
  bad("long target", "GET /" + std::string(5000, 'a') + " HTTP/1.1\r\n" + kHead + "\r\n", 431, "header_too_large");
  bad("declared body too large", "POST /v1/completions HTTP/1.1\r\n" + kHead + "Content-Length: 20000\r\n\r\n", 413,
      "body_too_large");
  bad("chunked body too large",
      "POST /v1/completions HTTP/1.1\r\n" + kHead + "Transfer-Encoding: chunked\r\n\r\n5000\r\n" + std::string(0x5000, 'a') +
          "\r\n0\r\n\r\n",
      413, "body_too_large");
  return c;
}

std::vector<Case> json_cases() {
  std::vector<Case> c;
  const std::vector<std::string> bodies = {
      "",        "{",           "}",           "[",           "{\"prompt\":}",   "{\"prompt\":\"x\",}",
      "{'prompt':'x'}", "{\"prompt\":NaN}", "{\"prompt\":Infinity}", "{\"prompt\":\"x\"} // c",
      "{\"prompt\":\"x\"} extra", "{prompt:\"x\"}", "1",  "\"x\"",      "null",        "true",
      "[]",      "[{\"prompt\":\"x\"}]", "{\"prompt\":\"\x01\"}", "{\"prompt\":\"\\x41\"}", "{\"prompt\":\"\\u12\"}",
      "{\"prompt\":\"\\ud800\"}", "{\"prompt\":\"\\udc00x\"}", "\xef\xbb{\"prompt\":\"x\"}", "{\"max_tokens\":01,\"prompt\":\"x\"}",
      "{\"max_tokens\":1.,\"prompt\":\"x\"}", "{\"max_tokens\":.5,\"prompt\":\"x\"}", "{\"max_tokens\":-,\"prompt\":\"x\"}",
      "{\"max_tokens\":1e,\"prompt\":\"x\"}", "{\"max_tokens\":+1,\"prompt\":\"x\"}", "{\"prompt\":\"x\"\"y\"}",
      "{\"prompt\" \"x\"}", "{\"prompt\":\"x\" \"max_tokens\":1}", "{\"prompt\":[1,2,]}", "{\"prompt\":\"unterminated}",
      "{\"prompt\":tru}", "{\"prompt\":nul}", std::string("\0{}", 3), "{\"a\":" + std::string(70, '[') + std::string(70, ']') + "}",
      std::string(100, '{'), std::string("{\"prompt\":\"x\"}\0", 15), "{\"prompt\":\"tab\there\"}", "{\"prompt\":\"nl\nhere\"}",
  };
  for (size_t i = 0; i < bodies.size(); ++i)
    c.push_back({"json " + std::to_string(i), post("/v1/completions", bodies[i]), 400, "invalid_json"});
  for (const char* b : {"", "{", "[]", "{\"messages\":[}"})
    c.push_back({std::string("chat json '") + b + "'", post("/v1/chat/completions", b), 400, "invalid_json"});
  return c;
}

std::vector<Case> field_cases() {
  std::vector<Case> c;
  auto comp = [&](const std::string& fields, const std::string& code) {
    const std::string body = "{\"prompt\":\"Hi\"" + (fields.empty() ? "" : "," + fields) + "}";
    c.push_back({"completions " + fields, post("/v1/completions", body), 400, code});
  };
  auto chat = [&](const std::string& body, const std::string& code) {
    c.push_back({"chat " + body, post("/v1/chat/completions", body), 400, code});
  };
  // prompt
  for (const auto& [body, code] : std::vector<std::pair<std::string, std::string>>{
           {"{}", "missing_field"},
           {"{\"prompt\":1}", "invalid_type"},
           {"{\"prompt\":{}}", "invalid_type"},
           {"{\"prompt\":true}", "invalid_type"},
           {"{\"prompt\":null}", "invalid_type"},
           {"{\"prompt\":[]}", "invalid_value"},
           {"{\"prompt\":\"\"}", "invalid_value"},
           {"{\"prompt\":[\"a\",\"b\"]}", "unsupported_parameter"},
           {"{\"prompt\":[[1],[2]]}", "unsupported_parameter"},
           {"{\"prompt\":[-1]}", "invalid_value"},
           {"{\"prompt\":[1.5]}", "invalid_type"},
           {"{\"prompt\":[1,\"a\"]}", "invalid_type"},
           {"{\"prompt\":[1,null]}", "invalid_type"},
           {"{\"prompt\":[4294967296]}", "invalid_value"},
           {"{\"prompt\":[[]]}", "invalid_value"},
           {"{\"prompt\":[true]}", "unsupported_parameter"},
           {"{\"prompt\":[999999]}", "invalid_value"},
       })
    c.push_back({"completions " + body, post("/v1/completions", body), 400, code});
  // max_tokens and friends
  for (const char* v : {"-1", "0", "1048577", "100000000000000000000", "1e30", "-1e30"}) comp(std::string("\"max_tokens\":") + v, "invalid_value");
  for (const char* v : {"\"5\"", "1.5", "true", "[]", "{}"}) comp(std::string("\"max_tokens\":") + v, "invalid_type");
  comp("\"max_completion_tokens\":0", "invalid_value");
  comp("\"max_completion_tokens\":\"x\"", "invalid_type");
  comp("\"max_tokens\":4,\"max_completion_tokens\":5", "invalid_value");
  // Floats in ranges.
  const std::vector<std::tuple<std::string, std::string, std::string>> ranges = {
      {"temperature", "-0.1", "2.1"},        {"top_p", "-0.1", "1.1"},
      {"min_p", "-0.5", "1.5"},              {"frequency_penalty", "-2.1", "2.1"},
      {"presence_penalty", "-2.5", "3"},     {"repetition_penalty", "0", "10.5"},
      {"repeat_penalty", "-1", "11"},
  };
  for (const auto& [f, lo, hi] : ranges) {
    comp("\"" + f + "\":" + lo, "invalid_value");
    comp("\"" + f + "\":" + hi, "invalid_value");
    comp("\"" + f + "\":1e309", "invalid_json");  // out of double range: not a JSON number we accept
    comp("\"" + f + "\":\"1\"", "invalid_type");
    comp("\"" + f + "\":true", "invalid_type");
    comp("\"" + f + "\":[0.5]", "invalid_type");
  }
  // top_k
  for (const char* v : {"-2", "2147483648", "-100"}) comp(std::string("\"top_k\":") + v, "invalid_value");
  for (const char* v : {"\"x\"", "1.5", "false"}) comp(std::string("\"top_k\":") + v, "invalid_type");
  // seed
  for (const char* v : {"9223372036854775808", "18446744073709551615", "-9223372036854775809", "9.3e18", "9.223372036854775808e18",
                        "-9.3e18", "1e300", "-1e300", "1e19"})
    comp(std::string("\"seed\":") + v, "invalid_value");
  for (const char* v : {"\"1\"", "1.5", "true", "[1]", "{}"}) comp(std::string("\"seed\":") + v, "invalid_type");
  // stop
  for (const char* v : {"1", "{}", "true"}) comp(std::string("\"stop\":") + v, "invalid_type");
  for (const char* v : {"[1]", "[\"a\",2]", "[null]", "[[\"a\"]]"}) comp(std::string("\"stop\":") + v, "invalid_type");
  comp("\"stop\":[" + [] {
    std::string s;
    for (int i = 0; i < 17; ++i) s += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
    return s;
  }() + "]", "invalid_value");
  // n, best_of
  for (const char* v : {"2", "0", "-1", "100"}) comp(std::string("\"n\":") + v, "unsupported_parameter");
  comp("\"n\":\"1\"", "invalid_type");
  comp("\"best_of\":2", "unsupported_parameter");
  comp("\"best_of\":\"x\"", "invalid_type");
  // stream and options
  for (const char* v : {"\"yes\"", "1", "[]"}) comp(std::string("\"stream\":") + v, "invalid_type");
  comp("\"stream_options\":{\"include_usage\":true}", "invalid_value");
  comp("\"stream\":true,\"stream_options\":1", "invalid_type");
  comp("\"stream\":true,\"stream_options\":{\"include_usage\":\"x\"}", "invalid_type");
  comp("\"stream\":false,\"stream_options\":{}", "invalid_value");
  // plain fields
  for (const char* f : {"ignore_eos"}) {
    comp(std::string("\"") + f + "\":\"x\"", "invalid_type");
    comp(std::string("\"") + f + "\":1", "invalid_type");
  }
  for (const char* f : {"user", "service_tier", "model"}) {
    comp(std::string("\"") + f + "\":1", "invalid_type");
    comp(std::string("\"") + f + "\":[]", "invalid_type");
    comp(std::string("\"") + f + "\":{}", "invalid_type");
  }
  comp("\"service_tier\":\"gold\"", "invalid_value");
  // tools
  comp("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]", "unsupported_parameter");
  comp("\"functions\":[{\"name\":\"f\"}]", "unsupported_parameter");
  comp("\"tool_choice\":\"auto\"", "unsupported_parameter");
  comp("\"function_call\":\"auto\"", "unsupported_parameter");
  // logprobs (completions: an integer 0..5)
  for (const char* v : {"6", "-1", "100"}) comp(std::string("\"logprobs\":") + v, "invalid_value");
  for (const char* v : {"\"x\"", "true", "1.5"}) comp(std::string("\"logprobs\":") + v, "invalid_type");
  comp("\"top_logprobs\":2", "invalid_value");
  comp("\"echo\":true", "unsupported_parameter");
  comp("\"echo\":1", "unsupported_parameter");
  comp("\"suffix\":\"x\"", "unsupported_parameter");
  // logit_bias
  comp("\"logit_bias\":[]", "invalid_type");
  comp("\"logit_bias\":1", "invalid_type");
  for (const char* k : {"abc", "-1", "99999999999", "", "1.5", " 1", "0x1"})
    comp(std::string("\"logit_bias\":{\"") + k + "\":1}", "invalid_value");
  comp("\"logit_bias\":{\"1\":101}", "invalid_value");
  comp("\"logit_bias\":{\"1\":-100.5}", "invalid_value");
  comp("\"logit_bias\":{\"1\":\"x\"}", "invalid_type");
  comp("\"logit_bias\":{\"1\":null}", "invalid_type");
  comp("\"logit_bias\":{\"4000000\":1}", "invalid_value");  // past the vocabulary
  // response_format
  comp("\"response_format\":{\"type\":\"json_object\"}", "unsupported_parameter");
  comp("\"response_format\":\"text\"", "unsupported_parameter");
  comp("\"response_format\":{}", "unsupported_parameter");
  // chat messages
  chat("{}", "missing_field");
  chat("{\"messages\":{}}", "invalid_type");
  chat("{\"messages\":\"hi\"}", "invalid_type");
  chat("{\"messages\":[]}", "invalid_value");
  chat("{\"messages\":[1]}", "invalid_type");
  chat("{\"messages\":[[]]}", "invalid_type");
  chat("{\"messages\":[{\"content\":\"x\"}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":1,\"content\":\"x\"}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"USER\",\"content\":\"x\"}]}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"user\"}]}", "missing_field");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":1}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":{}}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"system\",\"content\":null},{\"role\":\"user\",\"content\":\"x\"}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"developer\",\"content\":null},{\"role\":\"user\",\"content\":\"x\"}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
       "unsupported_content");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":[1]}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\"}]}]}", "unsupported_parameter");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":\"x\"}", "invalid_type");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":-1}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"seed\":-9223372036854775809}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}", "invalid_value");
  chat("{\"messages\":[{\"role\":\"user\",\"content\":\"" + std::string(8000, 'a') + " " + std::string(6000, 'b') + "\"}]}",
       "context_length_exceeded");
  c.push_back({"completions: prompt past the context", post("/v1/completions", [] {
                 std::string s = "{\"prompt\":\"";
                 for (int i = 0; i < 60; ++i) s += "Once upon a time ";
                 return s + "\"}";
               }()),
               400, "context_length_exceeded"});
  return c;
}

std::vector<Case> utf8_cases() {
  std::vector<Case> c;
  const std::vector<std::string> seqs = {
      "\xff",         "\xfe",         "\xc0\x80",         "\xc1\xbf",         "\xe0\x80\x80",     "\xed\xa0\x80",
      "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xf8\x88\x80\x80\x80", "\x80",         "\xbf",
      "\xc3",         "\xe2\x82",     "\xf0\x9f\x98",     "\xc3\x28",         "\xe2\x28\xa1",     "\xf0\x28\x8c\xbc",
      "\xf0\x80\x80\xaf", "\xfc\x80\x80\x80\x80\xaf",
  };
  for (size_t i = 0; i < seqs.size(); ++i)
    c.push_back({"utf8 prompt " + std::to_string(i), post("/v1/completions", "{\"prompt\":\"a" + seqs[i] + "b\"}"), 400,
                 "invalid_json"});
  for (size_t i = 0; i < 6; ++i)
    c.push_back({"utf8 chat content " + std::to_string(i),
                 post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" + seqs[i] + "\"}]}"), 400,
                 "invalid_json"});
  c.push_back({"utf8 in a key", post("/v1/completions", "{\"prompt\":\"x\",\"\xff\":1}"), 400, "invalid_json"});
  c.push_back({"utf8 in stop", post("/v1/completions", "{\"prompt\":\"x\",\"stop\":[\"\xc0\xaf\"]}"), 400, "invalid_json"});
  c.push_back({"utf8 in a role", post("/v1/chat/completions", "{\"messages\":[{\"role\":\"us\xe9r\",\"content\":\"x\"}]}"), 400,
               "invalid_json"});
  c.push_back({"utf8 in a string escape pair", post("/v1/completions", "{\"prompt\":\"\\ud83d\\u0041\"}"), 400, "invalid_json"});
  return c;
}

std::vector<Case> route_cases() {
  std::vector<Case> c;
  auto req = [&](const std::string& m, const std::string& path, int status, const std::string& code) {
    c.push_back({"route " + m + " " + path, m + " " + path + " HTTP/1.1\r\n" + kHead + "Content-Length: 0\r\n\r\n", status, code});
  };
  for (const char* p : {"/v1/nothing", "/v1", "/", "/v1/completions/", "/V1/completions", "/v1/chat", "/admin", "/v2/models",
                        "/%2e%2e/admin"})
    req("GET", p, 404, "not_found");
  // Paths are not normalized: this asks for a model of that name (OpenAI's 404 shape).
  req("GET", "/v1/models/../../admin/stats", 404, "model_not_found");
  req("GET", "/v1/models/no-such-model", 404, "model_not_found");
  req("GET", "/v1/completions", 405, "method_not_allowed");
  req("GET", "/v1/chat/completions", 405, "method_not_allowed");
  req("DELETE", "/v1/completions", 405, "method_not_allowed");
  req("PUT", "/v1/chat/completions", 405, "method_not_allowed");
  req("POST", "/health/live", 405, "method_not_allowed");
  req("POST", "/v1/models", 405, "method_not_allowed");
  req("PATCH", "/metrics", 405, "method_not_allowed");
  req("BREW", "/v1/completions", 405, "method_not_allowed");
  return c;
}

class Robustness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0);
    srv = new ServerProcess(kWork, "robust");
    ASSERT_TRUE(srv->start(TS_TIERSERVE_BIN, "limits: {max_header_bytes: 4096, max_body_bytes: 16384}\nhttp: {threads: 2}\n",
                           {"-m", kStories, "-t", "1"}))
        << srv->stderr_text();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(srv->stop(SIGTERM), 0) << srv->stderr_text();
    delete srv;
  }
  static ServerProcess* srv;
};
ServerProcess* Robustness::srv = nullptr;

// Sends the bytes, reads to EOF, and checks the one response.
void check_case(int port, const Case& k) {
  const int fd = connect_to(port);
  ASSERT_GE(fd, 0) << k.name;
  send_all(fd, k.bytes);  // may fail part-way once the server answered and closed
  std::string raw;
  char buf[16384];
  bool reset = false;
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0) {
      reset = true;
      break;
    }
    raw.append(buf, size_t(n));
  }
  ::close(fd);
  EXPECT_FALSE(reset) << k.name << ": the connection was reset";
  const HttpResult r = parse_response(raw);
  EXPECT_EQ(r.status, k.status) << k.name << ":\n" << raw;
  json j;
  try {
    j = json::parse(r.body);
  } catch (...) {
    ADD_FAILURE() << k.name << ": the body is not JSON:\n" << raw;
    return;
  }
  ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_object()) << k.name << ": " << r.body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << k.name;
  EXPECT_TRUE(e["type"].is_string()) << k.name;
  EXPECT_TRUE(e.contains("param") && (e["param"].is_null() || e["param"].is_string())) << k.name;
  EXPECT_EQ(e["code"], k.code) << k.name << ": " << r.body;
  const bool route_404 = k.status == 404 && k.code == "not_found";  // OpenAI: a model not found is invalid_request_error
  EXPECT_EQ(e["type"], k.status >= 500 ? "server_error" : route_404 ? "not_found_error" : "invalid_request_error") << k.name;
}

TEST_F(Robustness, EveryMalformedRequestGetsItsStatusAndCodeAndTheServerLives) {
  std::vector<Case> all;
  for (auto part : {framing_cases(), json_cases(), field_cases(), utf8_cases(), route_cases()})
    all.insert(all.end(), part.begin(), part.end());
  std::set<std::string> distinct;
  for (const auto& k : all) distinct.insert(k.bytes);
  EXPECT_EQ(distinct.size(), all.size()) << "two cases send the same bytes";
  EXPECT_GE(all.size(), 300u);
  for (const auto& k : all) {
    check_case(srv->port(), k);
    ASSERT_EQ(http(srv->port(), "GET", "/health/live").status, 200) << "the server died after: " << k.name;
  }
  // And it still serves real work.
  const HttpResult ok = http(srv->port(), "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2})");
  EXPECT_EQ(ok.status, 200) << ok.body;
  std::printf("%zu malformed requests checked\n", all.size());
}

// The gateway serves through the same HTTP layer: every framing case gets the same status
// and error there, and it lives (the other classes are the worker's, behind it).
TEST(RobustnessGateway, EveryFramingCaseGetsItsStatusAndCodeAndTheGatewayLives) {
  ASSERT_EQ(std::system(("mkdir -p '" + kWork + "'").c_str()), 0);
  ServerProcess gw(kWork, "robust-gw");
  ASSERT_TRUE(gw.start_command(TS_TIERSERVE_BIN, "gateway",
                               "limits: {max_header_bytes: 4096, max_body_bytes: 16384}\nhttp: {threads: 2}\n"
                               "workers:\n  - {name: w, kind: local, model: stories, path: '" + kStories +
                                   "', threads: 1, pool: shared}\n",
                               {"--work-dir", kWork + "/robust-gw.d"}))
      << gw.stderr_text();
  const std::vector<Case> framing = framing_cases();
  ASSERT_GE(framing.size(), 100u);
  for (const auto& k : framing) {
    check_case(gw.port(), k);
    ASSERT_EQ(http(gw.port(), "GET", "/health/live").status, 200) << "the gateway died after: " << k.name;
  }
  EXPECT_EQ(gw.stop(SIGTERM), 0) << gw.stderr_text();
  std::printf("%zu framing cases checked on the gateway\n", framing.size());
}

}  // namespace
}  // namespace ts
