#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ts::server {
namespace {

using json = nlohmann::json;

ResponseHead head(Endpoint ep) {
  ResponseHead h;
  h.endpoint = ep;
  h.id = ep == Endpoint::kChat ? "chatcmpl-1" : "cmpl-1";
  h.created = 1700000000;
  h.model = "m";
  return h;
}

TEST(SseFraming, GoldenText) {
  EXPECT_EQ(sse_data(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_comment("tierserve preempted tier=batch"), ": tierserve preempted tier=batch\n\n");
  // A newline would end the comment and start a field; it is flattened.
  EXPECT_EQ(sse_comment("a\nb\rc"), ": a b c\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAiResponse, ChatCompletionGolden) {
  ServedInfo s{"ultrafast", "standard", "default", "not_entitled", 1.25, 20.5, 1};
  const std::string body = completion_body(head(Endpoint::kChat), "Paris.", "stop", {9, 2, 0}, s);
  EXPECT_EQ(body,
            R"({"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"Paris.","refusal":null,)"
            R"("role":"assistant"}}],"created":1700000000,"id":"chatcmpl-1","model":"m","object":"chat.completion",)"
            R"("service_tier":"default","system_fingerprint":null,"tierserve":{"degraded_reason":"not_entitled",)"
            R"("preemptions":1,"queue_ms":1.25,"tier_requested":"ultrafast","tier_served":"standard","ttft_ms":20.5},)"
            R"("usage":{"completion_tokens":2,"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":11}})");
}

TEST(OpenAiResponse, TextCompletionAndChunks) {
  ServedInfo s{"batch", "batch", "flex", "", 0, 0, 0};
  const json c = json::parse(completion_body(head(Endpoint::kCompletions), "x", "length", {1, 1, 0}, s));
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(c["tierserve"]["degraded_reason"].is_null());

  const json first = json::parse(chunk_json(head(Endpoint::kChat), "He", true, "", "default"));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "He");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(first["service_tier"], "default");
  EXPECT_FALSE(first.contains("usage"));  // only with include_usage (then null until the usage chunk)
  EXPECT_TRUE(json::parse(chunk_json(head(Endpoint::kChat), "He", true, "", "default", nullptr, true))["usage"].is_null());
  const json last = json::parse(chunk_json(head(Endpoint::kChat), "", false, "stop", "standard"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("content"));
  const json tc = json::parse(chunk_json(head(Endpoint::kCompletions), "lo", false, "", "batch"));
  EXPECT_EQ(tc["object"], "text_completion");
  EXPECT_EQ(tc["choices"][0]["text"], "lo");

  const json u = json::parse(usage_chunk_json(head(Endpoint::kChat), {5, 7, 3}, s));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 12);
  EXPECT_EQ(u["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(u["tierserve"]["tier_served"], "batch");
}

TEST(OpenAiResponse, LogprobsGolden) {
  ServedInfo s{"standard", "standard", "default", "", 0, 0, 0};
  LogprobsInfo lp;
  lp.tokens = {{"Par", -0.25, {{"Par", -0.25}, {"Lon", -1.5}}}, {"is\xe2", -0.5, {{"is\xe2", -0.5}, {"is", -0.5}}}};
  const json chat = json::parse(completion_body(head(Endpoint::kChat), "Paris", "stop", {1, 2, 0}, s, &lp));
  EXPECT_EQ(chat["choices"][0]["logprobs"].dump(),
            R"({"content":[{"bytes":[80,97,114],"logprob":-0.25,"token":"Par","top_logprobs":[)"
            R"({"bytes":[80,97,114],"logprob":-0.25,"token":"Par"},{"bytes":[76,111,110],"logprob":-1.5,"token":"Lon"}]},)"
            R"({"bytes":[105,115,226],"logprob":-0.5,"token":"is)" "\xEF\xBF\xBD" R"(","top_logprobs":[)"
            R"({"bytes":[105,115,226],"logprob":-0.5,"token":"is)" "\xEF\xBF\xBD" R"("},{"bytes":[105,115],"logprob":-0.5,"token":"is"}]}],)"
            R"("refusal":null})");
  lp.text_offset = 10;
  const json cmpl = json::parse(completion_body(head(Endpoint::kCompletions), "Paris", "stop", {1, 2, 0}, s, &lp));
  EXPECT_EQ(cmpl["choices"][0]["logprobs"].dump(),
            R"({"text_offset":[10,13],"token_logprobs":[-0.25,-0.5],"tokens":["Par","is)" "\xEF\xBF\xBD" R"("],)"
            R"("top_logprobs":[{"Lon":-1.5,"Par":-0.25},{"is":-0.5,"is)" "\xEF\xBF\xBD" R"(":-0.5}]})");
  // Streamed: a chunk carries its tokens' logprobs; none asked or none new -> null.
  const json chunk = json::parse(chunk_json(head(Endpoint::kChat), "Paris", false, "", "standard", &lp));
  EXPECT_EQ(chunk["choices"][0]["logprobs"]["content"].size(), 2u);
  EXPECT_TRUE(json::parse(chunk_json(head(Endpoint::kChat), "x", false, "", "standard"))["choices"][0]["logprobs"].is_null());
  LogprobsInfo none;
  EXPECT_TRUE(json::parse(chunk_json(head(Endpoint::kChat), "x", false, "", "standard", &none))["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiResponse, InvalidUtf8InTextIsReplacedNotThrown) {
  ServedInfo s{"standard", "standard", "default", "", 0, 0, 0};
  const std::string body = completion_body(head(Endpoint::kCompletions), "a\xff", "stop", {1, 1, 0}, s);
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << body;
  EXPECT_EQ(j["choices"][0]["text"], "a\xef\xbf\xbd");  // U+FFFD
}

TEST(OpenAiResponse, IdsAreUniqueAndPrefixed) {
  const std::string a = make_response_id(Endpoint::kChat), b = make_response_id(Endpoint::kChat);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(make_response_id(Endpoint::kCompletions).rfind("cmpl-", 0), 0u);
}

}  // namespace
}  // namespace ts::server
