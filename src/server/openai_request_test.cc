#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ts::server {
namespace {

std::optional<ApiError> chat(const std::string& body, CompletionRequest& r, RequestLimits lim = {}) {
  return parse_completion_request(body, Endpoint::kChat, lim, r);
}
std::optional<ApiError> comp(const std::string& body, CompletionRequest& r, RequestLimits lim = {}) {
  return parse_completion_request(body, Endpoint::kCompletions, lim, r);
}

TEST(OpenAiRequest, ChatWithEveryField) {
  CompletionRequest r;
  auto e = chat(R"({"model":"m","messages":[{"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]},
      {"role":"assistant","content":"hello"},{"role":"developer","content":"d"}],
      "max_completion_tokens":12,"temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.05,
      "frequency_penalty":0.1,"presence_penalty":-0.2,"repetition_penalty":1.1,"stop":["\n","END",""],
      "seed":-7,"n":1,"stream":true,"stream_options":{"include_usage":true},"user":"u1",
      "service_tier":"priority","logprobs":false,"tools":[],"response_format":{"type":"text"},"unknown_field":{}})",
                r);
  ASSERT_FALSE(e) << e->message;
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_EQ(r.messages[3].role, "system");  // developer
  EXPECT_EQ(r.max_tokens.value(), 12);
  EXPECT_DOUBLE_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_k, 40);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.seed.value(), -7);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.service_tier.value(), "priority");
  EXPECT_EQ(r.logprobs, -1);  // logprobs: false
}

TEST(OpenAiRequest, Logprobs) {
  CompletionRequest r;
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"a"}],"logprobs":true})", r));
  EXPECT_EQ(r.logprobs, 0);
  r = {};
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"a"}],"logprobs":true,"top_logprobs":5})", r));
  EXPECT_EQ(r.logprobs, 5);
  r = {};
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"a"}],"logprobs":null})", r));
  EXPECT_EQ(r.logprobs, -1);
  CompletionRequest c;
  RequestLimits lim;
  ASSERT_FALSE(parse_completion_request(R"({"prompt":"a","logprobs":3})", Endpoint::kCompletions, lim, c));
  EXPECT_EQ(c.logprobs, 3);
  c = {};
  ASSERT_FALSE(parse_completion_request(R"({"prompt":"a","logprobs":0})", Endpoint::kCompletions, lim, c));
  EXPECT_EQ(c.logprobs, 0);
}

TEST(OpenAiRequest, TokenIdPrompts) {
  CompletionRequest r;
  ASSERT_FALSE(comp(R"({"prompt":[1,2,3,2147483647]})", r));
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{1, 2, 3, 2147483647}));
  EXPECT_TRUE(r.prompt.empty());
  r = {};
  ASSERT_FALSE(comp(R"({"prompt":[[5,0,4.0]]})", r));
  EXPECT_EQ(r.prompt_tokens, (std::vector<int32_t>{5, 0, 4}));
  r = {};
  ASSERT_FALSE(comp(R"({"prompt":["text"]})", r));
  EXPECT_EQ(r.prompt, "text");
  EXPECT_TRUE(r.prompt_tokens.empty());
}

TEST(OpenAiRequest, LogitBias) {
  CompletionRequest r;
  ASSERT_FALSE(chat(R"({"messages":[{"role":"user","content":"a"}],"logit_bias":{"50256":-100,"7":2.5,"0":100}})", r));
  auto got = r.logit_bias;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::pair<int32_t, float>>{{0, 100.0f}, {7, 2.5f}, {50256, -100.0f}}));
  r = {};
  ASSERT_FALSE(comp(R"({"prompt":"a","logit_bias":{}})", r));
  EXPECT_TRUE(r.logit_bias.empty());
  RequestLimits lim;
  lim.max_logit_bias = 2;
  EXPECT_TRUE(comp(R"({"prompt":"a","logit_bias":{"1":1,"2":2,"3":3}})", r, lim).has_value());
  EXPECT_FALSE(comp(R"({"prompt":"a","logit_bias":{"1":1,"2":2}})", r, lim).has_value());
}

TEST(OpenAiRequest, CompletionDefaults) {
  CompletionRequest r;
  ASSERT_FALSE(comp(R"({"prompt":"Once upon"})", r));
  EXPECT_EQ(r.prompt, "Once upon");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_DOUBLE_EQ(r.temperature, 1.0);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.service_tier.has_value());
  ASSERT_FALSE(comp(R"({"prompt":["one string"],"stop":"x","max_tokens":16.0,"seed":null})", r));
  EXPECT_EQ(r.prompt, "one string");
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.max_tokens.value(), 16);
}

struct BadCase {
  Endpoint ep;
  const char* body;
  const char* param;  // expected ApiError::param
  const char* code;   // expected ApiError::code
};

TEST(OpenAiRequest, BadRequestsAre400WithTheField) {
  const BadCase cases[] = {
      {Endpoint::kChat, "", "", "invalid_json"},
      {Endpoint::kChat, "{", "", "invalid_json"},
      {Endpoint::kChat, "[1,2]", "", "invalid_json"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],})", "", "invalid_json"},
      {Endpoint::kChat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", "", "invalid_json"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"\ud800"}]})", "", "invalid_json"},
      {Endpoint::kChat, R"({"model":"m"})", "messages", "missing_field"},
      {Endpoint::kChat, R"({"messages":[]})", "messages", "invalid_value"},
      {Endpoint::kChat, R"({"messages":"hi"})", "messages", "invalid_type"},
      {Endpoint::kChat, R"({"messages":[{"role":"tool","content":"x"}]})", "messages[0].role", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user"}]})", "messages[0].content", "missing_field"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0]",
       "unsupported_content"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"n":2})", "n", "unsupported_parameter"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"max_tokens":-1})", "max_tokens", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"max_tokens":0})", "max_tokens", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"max_tokens":99999999999999999999})", "max_tokens",
       "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"max_tokens":1e300})", "max_tokens", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"max_tokens":2000000})", "max_tokens", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"max_tokens":1.5})", "max_tokens", "invalid_type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"max_tokens":"8"})", "max_tokens", "invalid_type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"max_tokens":4,"max_completion_tokens":5})",
       "max_completion_tokens", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"temperature":3})", "temperature", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"temperature":-0.1})", "temperature", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"top_p":"x"})", "top_p", "invalid_type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"top_k":-5})", "top_k", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"stop":[1]})", "stop[0]", "invalid_type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"stream":"yes"})", "stream", "invalid_type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"stream_options":{"include_usage":true}})",
       "stream_options", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"service_tier":3})", "service_tier", "invalid_type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]})", "tools",
       "unsupported_parameter"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"logprobs":"yes"})", "logprobs", "invalid_type"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"top_logprobs":2})", "top_logprobs", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"logprobs":true,"top_logprobs":21})", "top_logprobs",
       "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logprobs":6})", "logprobs", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logprobs":true})", "logprobs", "invalid_type"},
      {Endpoint::kCompletions, R"({"prompt":"a","top_logprobs":2})", "top_logprobs", "invalid_value"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":"a"}],"response_format":{"type":"json_object"}})",
       "response_format", "unsupported_parameter"},
      {Endpoint::kCompletions, R"({"max_tokens":3})", "prompt", "missing_field"},
      {Endpoint::kCompletions, R"({"prompt":""})", "prompt", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":["a","b"]})", "prompt", "unsupported_parameter"},
      {Endpoint::kCompletions, R"({"prompt":[[1,2],[3]]})", "prompt", "unsupported_parameter"},
      {Endpoint::kCompletions, R"({"prompt":[]})", "prompt", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":[[]]})", "prompt", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":[1,-2]})", "prompt[1]", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":[1,2147483648]})", "prompt[1]", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":[1,2.5]})", "prompt[1]", "invalid_type"},
      {Endpoint::kCompletions, R"({"prompt":[1,"a"]})", "prompt[1]", "invalid_type"},
      {Endpoint::kCompletions, R"({"prompt":[[7,null]]})", "prompt[0][1]", "invalid_type"},
      {Endpoint::kCompletions, R"({"prompt":["a",1]})", "prompt", "unsupported_parameter"},
      {Endpoint::kCompletions, R"({"prompt":42})", "prompt", "invalid_type"},
      {Endpoint::kCompletions, R"({"prompt":"a","echo":true})", "echo", "unsupported_parameter"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":[1]})", "logit_bias", "invalid_type"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"1":101}})", "logit_bias.1", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"1":-100.5}})", "logit_bias.1", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"1":"5"}})", "logit_bias.1", "invalid_type"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"1":null}})", "logit_bias.1", "invalid_type"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"-1":5}})", "logit_bias", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"1.5":5}})", "logit_bias", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"":5}})", "logit_bias", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{" 1":5}})", "logit_bias", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"2147483648":5}})", "logit_bias", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","logit_bias":{"99999999999999999999":5}})", "logit_bias", "invalid_value"},
      {Endpoint::kCompletions, R"({"prompt":"a","best_of":3})", "best_of", "unsupported_parameter"},
      {Endpoint::kCompletions, R"({"prompt":"a","seed":1.5})", "seed", "invalid_type"},
  };
  RequestLimits lim;
  lim.max_tokens_cap = 1000000;
  for (const BadCase& c : cases) {
    CompletionRequest r;
    auto e = parse_completion_request(c.body, c.ep, lim, r);
    ASSERT_TRUE(e.has_value()) << c.body;
    EXPECT_EQ(e->status, 400) << c.body;
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_EQ(e->param, c.param) << c.body << " -> " << e->message;
    EXPECT_EQ(e->code, c.code) << c.body << " -> " << e->message;
    EXPECT_FALSE(e->message.empty());
    // The error object itself is valid JSON even when the message quotes bad bytes.
    EXPECT_NE(e->to_json().find("\"error\""), std::string::npos);
  }
}

TEST(OpenAiRequest, SeedsOutsideInt64AndInexactFloatsAreRefused) {
  CompletionRequest r;
  for (const char* seed : {"-9223372036854775809", "9223372036854775808", "9.223372036854775808e18", "-9.3e18",
                           "18446744073709551616", "1e19", "9007199254740994.0"}) {
    auto e = comp(std::string(R"({"prompt":"x","seed":)") + seed + "}", r);
    ASSERT_TRUE(e) << seed;
    EXPECT_EQ(e->code, "invalid_value") << seed;
    EXPECT_EQ(e->param, "seed");
  }
  // The ends of the range written as integers, and exact floats, are fine.
  for (const auto& [seed, want] : std::vector<std::pair<std::string, int64_t>>{
           {"-9223372036854775808", INT64_MIN}, {"9223372036854775807", INT64_MAX}, {"9007199254740992.0", 9007199254740992LL},
           {"-12.0", -12}}) {
    auto e = comp(R"({"prompt":"x","seed":)" + seed + "}", r);
    ASSERT_FALSE(e) << seed << ": " << e->message;
    EXPECT_EQ(r.seed.value(), want) << seed;
  }
}

TEST(OpenAiRequest, NullContentOnlyForAssistantMessages) {
  CompletionRequest r;
  EXPECT_FALSE(chat(R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null}]})", r));
  for (const char* role : {"user", "system", "developer"}) {
    auto e = chat(std::string(R"({"messages":[{"role":")") + role + R"(","content":null}]})", r);
    ASSERT_TRUE(e) << role;
    EXPECT_EQ(e->code, "invalid_type") << role;
    EXPECT_EQ(e->param, "messages[0].content");
  }
}

TEST(OpenAiRequest, NulBytesAreNotJson) {
  CompletionRequest r;
  auto e = comp(std::string("{\"prompt\":\"x\"}\0{\"junk\":1}", 26), r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code, "invalid_json");
}

TEST(OpenAiRequest, DeepNestingIsRefusedBeforeParsing) {
  CompletionRequest r;
  const std::string deep = "{\"prompt\":\"a\",\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto e = comp(deep, r);
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("nested deeper"), std::string::npos);
  // Brackets inside strings do not count.
  ASSERT_FALSE(comp("{\"prompt\":\"" + std::string(1000, '[') + "\"}", r));
  EXPECT_EQ(json_depth(R"({"a":[{"b":"[[[\"["}]})", 10), 3);
}

TEST(OpenAiRequest, LimitsOnStopsAndMessages) {
  RequestLimits lim;
  lim.max_stop_strings = 2;
  lim.max_messages = 1;
  CompletionRequest r;
  EXPECT_TRUE(comp(R"({"prompt":"a","stop":["1","2","3"]})", r, lim).has_value());
  EXPECT_FALSE(comp(R"({"prompt":"a","stop":["1","2"]})", r, lim).has_value());
  EXPECT_TRUE(chat(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]})", r, lim).has_value());
}

}  // namespace
}  // namespace ts::server
