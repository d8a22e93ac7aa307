// Inputs of the load tester: workload files and generators, SLO files and their
// verdicts, the SSE parser and the response reader (no sockets).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "bench/slo.h"
#include "bench/workload.h"
#include "response.h"
#include "sse.h"

namespace ts::bench {
namespace {

TEST(LengthDist, ParsesEveryFormAndRejectsBadOnes) {
  EXPECT_EQ(parse_length_dist("128")->kind, LengthDist::kFixed);
  EXPECT_EQ(parse_length_dist("uniform:10:20")->b, 20);
  EXPECT_EQ(parse_length_dist("normal:100:10")->kind, LengthDist::kNormal);
  EXPECT_EQ(parse_length_dist("exp:50")->kind, LengthDist::kExp);
  EXPECT_EQ(parse_length_dist("lognormal:64:0.5")->kind, LengthDist::kLogNormal);
  for (const char* bad : {"", "x", "uniform:20:10", "normal:5", "fixed:0", "gauss:1:2", "uniform:1:2:3"})
    EXPECT_FALSE(parse_length_dist(bad).is_ok()) << bad;
  Rng rng(1);
  const LengthDist u = *parse_length_dist("uniform:10:20");
  std::set<int> seen;
  for (int i = 0; i < 2000; ++i) {
    const int v = u.sample(rng);
    ASSERT_GE(v, 10);
    ASSERT_LE(v, 20);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 11u);  // both ends reachable
}

TEST(TierMix, ParsesWeightsAndPicksInProportion) {
  auto mix = parse_tier_mix("ultrafast=20,standard=70,batch=10");
  ASSERT_TRUE(mix.is_ok());
  ASSERT_EQ(mix->size(), 3u);
  EXPECT_EQ(pick_tier(*mix, 0.0), "ultrafast");
  EXPECT_EQ(pick_tier(*mix, 0.19), "ultrafast");
  EXPECT_EQ(pick_tier(*mix, 0.21), "standard");
  EXPECT_EQ(pick_tier(*mix, 0.95), "batch");
  EXPECT_FALSE(parse_tier_mix("a=-1").is_ok());
  EXPECT_FALSE(parse_tier_mix("a=0,b=0").is_ok());
  EXPECT_FALSE(parse_tier_mix("=3").is_ok());
  EXPECT_EQ(parse_tier_mix("default=1")->at(0).tier, "");
}

TEST(Workload, SyntheticIsSeededAndFollowsTheMix) {
  SyntheticSpec spec;
  spec.input = *parse_length_dist("uniform:8:16");
  spec.output = *parse_length_dist("32");
  spec.mix = *parse_tier_mix("ultrafast=20,standard=70,batch=10");
  const Workload a = Workload::synthetic(spec, 5), b = Workload::synthetic(spec, 5), c = Workload::synthetic(spec, 6);
  std::map<std::string, int> count;
  int differ = 0;
  for (size_t i = 0; i < 5000; ++i) {
    const RequestSpec x = a.at(i), y = b.at(i);
    ASSERT_EQ(x.prompt, y.prompt);
    ASSERT_EQ(x.tier, y.tier);
    ASSERT_EQ(x.max_tokens, 32);
    ASSERT_GE(x.approx_prompt_tokens, 8);
    differ += c.at(i).prompt != x.prompt;
    ++count[x.tier];
  }
  EXPECT_GT(differ, 4900);
  EXPECT_NEAR(count["ultrafast"] / 5000.0, 0.2, 0.03);
  EXPECT_NEAR(count["standard"] / 5000.0, 0.7, 0.03);
  EXPECT_NEAR(count["batch"] / 5000.0, 0.1, 0.03);
}

TEST(Workload, JsonlReplayCyclesAndKeepsOffsets) {
  const std::string text =
      "{\"prompt\": \"once upon\", \"max_tokens\": 8, \"tier\": \"ultrafast\", \"offset_ms\": 0, \"temperature\": 0}\n"
      "\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4, \"service_tier\": \"batch\", "
      "\"api_key\": \"k2\", \"offset_ms\": 250}\n";
  auto w = Workload::from_jsonl_text(text, "t.jsonl");
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(w->replay_size(), 2u);
  EXPECT_TRUE(w->has_offsets());
  EXPECT_EQ(w->at(0).endpoint, "completions");
  EXPECT_EQ(w->at(0).prompt, "once upon");
  ASSERT_TRUE(w->at(0).temperature.has_value());
  EXPECT_EQ(*w->at(0).temperature, 0.0);
  EXPECT_FALSE(w->at(1).temperature.has_value());
  EXPECT_EQ(w->at(1).endpoint, "chat");
  EXPECT_EQ(w->at(1).tier, "batch");
  EXPECT_EQ(w->at(1).api_key, "k2");
  EXPECT_EQ(*w->at(1).offset_ms, 250);
  // The second pass continues after the first: 251 ms later.
  EXPECT_EQ(*w->at(2).offset_ms, 251);
  EXPECT_EQ(*w->at(3).offset_ms, 501);
  w->set_max_tokens_override(3);
  EXPECT_EQ(w->at(0).max_tokens, 3);
  w->set_tier_mix(*parse_tier_mix("standard"), 1);
  EXPECT_EQ(w->at(0).tier, "standard");
}

TEST(Workload, JsonlErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"{\"prompt\": \"a\"}\nnot json\n", "t:2"},
      {"{\"max_tokens\": 3}\n", "needs \"prompt\""},
      {"{\"prompt\": \"a\", \"max_tokens\": 0}\n", "max_tokens"},
      {"{\"prompt\": \"a\", \"max_tokens\": \"x\"}\n", "wrong field type"},
      {"{\"messages\": []}\n", "non-empty"},
      {"{\"prompt\": \"a\", \"temperature\": 3}\n", "temperature"},
      {"\n\n", "no requests"},
  };
  for (const auto& c : cases) {
    auto w = Workload::from_jsonl_text(c.text, "t");
    ASSERT_FALSE(w.is_ok()) << c.text;
    EXPECT_NE(w.status().message().find(c.want), std::string::npos) << w.status().message();
  }
  EXPECT_FALSE(Workload::from_jsonl("/nonexistent/x.jsonl").is_ok());
}

class FakeMetrics : public MetricSource {
 public:
  std::map<std::string, double> v;  // "tier/metric/stat"
  bool has_tier(const std::string& t) const override { return t != "ghost"; }
  double value(const std::string& t, const std::string& m, const std::string& s) const override {
    auto it = v.find(t + "/" + m + "/" + s);
    return it == v.end() ? NAN : it->second;
  }
};

TEST(Slo, YamlWithUnitsOperatorsAndVerdicts) {
  auto slo = parse_slo_text(
      "ultrafast:\n"
      "  ttft_p99: 300ms\n"
      "  tpot_p99: 50\n"
      "  error_rate: 1%\n"
      "standard:\n"
      "  e2e_p99.9: 5s\n"
      "  throughput_rps: \">= 2\"\n"
      "overall:\n"
      "  degradation_rate: 0.05\n");
  ASSERT_TRUE(slo.is_ok()) << slo.status().to_string();
  ASSERT_EQ(slo->tiers.size(), 3u);
  EXPECT_EQ(slo->tiers[0].second[0].limit, 300);
  EXPECT_EQ(slo->tiers[0].second[2].limit, 0.01);
  EXPECT_EQ(slo->tiers[1].second[0].limit, 5000);
  EXPECT_EQ(slo->tiers[1].second[0].stat, "p99.9");
  EXPECT_TRUE(slo->tiers[1].second[1].at_least);

  FakeMetrics m;
  m.v = {{"ultrafast/ttft/p99", 250}, {"ultrafast/tpot/p99", 49}, {"ultrafast/error_rate/", 0.0},
         {"standard/e2e/p99.9", 5200}, {"standard/throughput_rps/", 3}, {"overall/degradation_rate/", 0.01}};
  auto v = evaluate_slo(*slo, m);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_TRUE(v[0].pass);
  EXPECT_FALSE(v[1].pass);  // e2e P99.9 5.2 s > 5 s
  EXPECT_FALSE(v[1].results[0].pass);
  EXPECT_TRUE(v[1].results[1].pass);
  EXPECT_TRUE(v[2].pass);
  EXPECT_FALSE(all_pass(v));
  m.v["standard/e2e/p99.9"] = 4000;
  EXPECT_TRUE(all_pass(evaluate_slo(*slo, m)));
  m.v.erase("ultrafast/tpot/p99");  // no data fails
  EXPECT_FALSE(all_pass(evaluate_slo(*slo, m)));
}

TEST(Slo, JsonFormAndMissingTier) {
  auto slo = parse_slo_text(R"({"ghost": {"ttft_p50": "<= 10 ms"}})");
  ASSERT_TRUE(slo.is_ok()) << slo.status().to_string();
  FakeMetrics m;
  m.v["ghost/ttft/p50"] = 1;
  auto v = evaluate_slo(*slo, m);
  EXPECT_TRUE(v[0].missing);
  EXPECT_FALSE(v[0].pass);
}

TEST(Slo, RejectsUnknownMetricsAndUnits) {
  for (const char* bad : {"a: {ttft_p42: 3}", "a: {latency: 3}", "a: {ttft_p99: 3 min}", "a: {error_rate: 3 ms}",
                          "a: 3", "[1, 2]", "a: {ttft_p99: [1]}", "a: {ttft_p99: abc}", "a: {b: c: d}"})
    EXPECT_FALSE(parse_slo_text(bad).is_ok()) << bad;
}

TEST(Slo, RequestLimitsForGoodput) {
  auto slo = parse_slo_text("ultrafast: {ttft_p99: 300, ttft_p50: 100, e2e_max: 2s}\noverall: {tpot_p95: 40}\n");
  ASSERT_TRUE(slo.is_ok());
  const auto l = slo->request_limits("ultrafast");
  EXPECT_EQ(l.ttft_ms, 100);  // the tightest latency limit applies per request
  EXPECT_EQ(l.e2e_ms, 2000);
  EXPECT_EQ(l.tpot_ms, 40);
  EXPECT_TRUE(std::isnan(l.itl_ms));
  EXPECT_TRUE(std::isnan(slo->request_limits("standard").ttft_ms));
}

TEST(Sse, EventsSplitAnywhereCommentsAndCrLf) {
  std::vector<std::string> data, comments;
  SseParser p([&](std::string_view d) { data.emplace_back(d); }, [&](std::string_view c) { comments.emplace_back(c); });
  const std::string s =
      ": tierserve tier=standard\r\n\r\ndata: {\"a\":1}\r\n\r\ndata: line1\ndata: line2\n\nevent: x\ndata:[DONE]\n\n";
  for (char ch : s) p.feed(std::string_view(&ch, 1));
  p.finish();
  ASSERT_EQ(data.size(), 3u);
  EXPECT_EQ(data[0], "{\"a\":1}");
  EXPECT_EQ(data[1], "line1\nline2");
  EXPECT_EQ(data[2], "[DONE]");
  ASSERT_EQ(comments.size(), 1u);
  EXPECT_EQ(comments[0], "tierserve tier=standard");
  // An unterminated last event still arrives at finish().
  data.clear();
  SseParser q([&](std::string_view d) { data.emplace_back(d); }, [](std::string_view) {});
  q.feed("data: tail");
  q.finish();
  ASSERT_EQ(data.size(), 1u);
  EXPECT_EQ(data[0], "tail");
}

TEST(ResponseReader, StreamTimesTokensAndReadsTierserveFields) {
  RequestRecord rec;
  rec.tier_requested = "ultrafast";
  rec.scheduled_ns = 0;
  ResponseReader r(&rec);
  r.on_status(200);
  r.on_header("content-type", "text/event-stream");
  r.on_header("x-tierserve-tier-served", "standard");
  r.on_header("x-tierserve-degraded-reason", "queue_timeout");
  r.on_body("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", 1'000'000);
  r.on_body("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"choices\":[{\"del", 50'000'000);
  r.on_body("ta\":{\"content\":\" there\"}}]}\n\n", 60'000'000);
  r.on_body("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}],\"service_tier\":\"default\","
            "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2},"
            "\"tierserve\":{\"tier_requested\":\"ultrafast\",\"tier_served\":\"standard\",\"degraded_reason\":\"queue_timeout\","
            "\"queue_ms\":12.5,\"ttft_ms\":40,\"preemptions\":1}}\n\ndata: [DONE]\n\n",
            70'000'000);
  r.on_end(71'000'000);
  EXPECT_TRUE(rec.ok()) << rec.error << " " << rec.error_detail;
  EXPECT_EQ(rec.first_token_ns, 50'000'000);
  ASSERT_EQ(rec.token_ns.size(), 2u);
  EXPECT_EQ(rec.token_ns[1], 60'000'000);
  EXPECT_EQ(rec.n_output_tokens, 2);
  EXPECT_EQ(rec.n_prompt_tokens, 5);
  EXPECT_EQ(rec.tier_served, "standard");
  EXPECT_TRUE(rec.degraded());
  EXPECT_EQ(rec.degraded_reason, "queue_timeout");
  EXPECT_EQ(rec.server_queue_ms, 12.5);
  EXPECT_EQ(rec.preemptions, 1);
  EXPECT_DOUBLE_EQ(rec.ttft_ms(), 50);
  EXPECT_DOUBLE_EQ(rec.tpot_ms(), 10);
}

TEST(ResponseReader, ErrorsByType) {
  struct Case {
    int status;
    const char* ctype;
    const char* body;
    const char* want;
  } cases[] = {
      {429, "application/json", "{\"error\":{\"message\":\"slow down\"}}", "http_429"},
      {503, "application/json", "{}", "http_503"},
      {400, "application/json", "{}", "http_400"},
      {500, "text/plain", "boom", "http_500"},
      {200, "text/event-stream", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n", "incomplete"},
      {200, "text/event-stream", "data: {\"error\":{\"message\":\"engine failed\"}}\n\ndata: [DONE]\n\n", "stream_error"},
      // Turned away in-band before any token: a refusal; after a token: a broken stream.
      {200, "text/event-stream", "data: {\"error\":{\"message\":\"waited\",\"code\":\"queue_timeout\"}}\n\ndata: [DONE]\n\n",
       "stream_refused"},
      {200, "text/event-stream",
       "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"w\",\"code\":\"overloaded\"}}\n\n"
       "data: [DONE]\n\n",
       "stream_error"},
      {200, "application/json", "not json", "protocol"},
  };
  for (const auto& c : cases) {
    RequestRecord rec;
    ResponseReader r(&rec);
    r.on_status(c.status);
    r.on_header("content-type", c.ctype);
    r.on_header("retry-after", "2");
    r.on_body(c.body, 5);
    r.on_end(10);
    EXPECT_EQ(rec.error, c.want) << c.status << " " << c.body;
    EXPECT_EQ(rec.retry_after_s, 2);
  }
}

TEST(ResponseReader, InBandTierChangeAndPreemptionComments) {
  RequestRecord rec;
  rec.tier_requested = "ultrafast";
  ResponseReader r(&rec);
  r.on_status(200);
  r.on_header("content-type", "text/event-stream");
  r.on_header("x-tierserve-tier-served", "ultrafast");
  r.on_body(": tierserve tier_changed from=ultrafast to=standard reason=queue_timeout\n\n"
            ": tierserve preempted tier=standard reason=kv_pressure\n\n"
            ": some other comment\n\n"
            "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
            5);
  r.on_end(6);
  EXPECT_TRUE(rec.ok());
  EXPECT_EQ(rec.n_tier_changes, 1);
  EXPECT_EQ(rec.tier_served, "standard");
  EXPECT_EQ(rec.degraded_reason, "queue_timeout");
  EXPECT_EQ(rec.preemptions, 1);
  EXPECT_TRUE(rec.degraded());
}

TEST(ResponseReader, ErrorCodeFromTheErrorObject) {
  RequestRecord rec;
  ResponseReader r(&rec);
  r.on_status(429);
  r.on_header("content-type", "application/json");
  r.on_body(R"({"error":{"message":"queue full","type":"rate_limit_error","code":"queue_full"}})", 1);
  r.on_end(2);
  EXPECT_EQ(rec.error, "http_429");
  EXPECT_EQ(rec.error_code, "queue_full");
}

TEST(ResponseReader, NonStreamBodyCountsUsageAndSetsTtftToTheEnd) {
  RequestRecord rec;
  ResponseReader r(&rec);
  r.on_status(200);
  r.on_header("content-type", "application/json");
  r.on_body("{\"choices\":[{\"message\":{\"content\":\"a b c\"}}],\"usage\":{\"completion_tokens\":7}}", 5);
  r.on_end(30'000'000);
  EXPECT_TRUE(rec.ok());
  EXPECT_EQ(rec.n_output_tokens, 7);
  EXPECT_EQ(rec.first_token_ns, 30'000'000);
}

}  // namespace
}  // namespace ts::bench
