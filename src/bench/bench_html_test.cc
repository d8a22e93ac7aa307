// The HTML report renders its charts in a real browser: a run against the slow test
// server (two tiers, a sweep with a knee) is written as HTML and loaded in headless
// Chromium; the DOM after the scripts ran must hold the SVG charts they create (the
// static page has none). Skips when chromium is absent, unless
// TIERSERVE_REQUIRE_CHROMIUM=1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "bench/bench.h"
#include "testing/slow_server.h"

namespace ts::bench {
namespace {

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string cmd = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return name;
  }
  return "";
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + 1)) ++n;
  return n;
}

Report sample_report() {
  testing::SlowServer srv({.ttft_ms = 10, .tier_ttft_ms = {{"ultrafast", 5}}, .per_token_ms = 1, .serial = true});
  Options o;
  o.url = srv.url();
  o.progress = false;
  o.arrival = {ArrivalKind::kConstant, 10, 1, 0};
  o.sweep = {20, 40, 80, 160};
  o.sweep_step_requests = 16;
  SyntheticSpec spec;
  spec.input = *parse_length_dist("4");
  spec.output = *parse_length_dist("2");
  spec.mix = *parse_tier_mix("ultrafast=1,standard=1");
  SteadyClock clock;
  auto r = run_bench(o, Workload::synthetic(spec, 3), clock);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(*r) : Report{};
}

TEST(HtmlReport, SelfContainedAndEmbedsTheData) {
  Report r = sample_report();
  const std::string html = to_html(r);
  // No network: nothing is loaded from elsewhere.
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(count(html, "<svg"), 0u);  // the charts come from the script
  EXPECT_NE(html.find("id=\"bench-data\""), std::string::npos);
  // A "</script>" inside the data must not end the element.
  r.workload = "evil </script><script>alert(1)</script>";
  const std::string h2 = to_html(r);
  EXPECT_EQ(count(h2, "</script>"), 2u);
}

TEST(HtmlReport, RendersChartsInHeadlessChromium) {
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    const char* req = std::getenv("TIERSERVE_REQUIRE_CHROMIUM");
    if (req && std::string(req) == "1") FAIL() << "chromium not found and TIERSERVE_REQUIRE_CHROMIUM=1";
    GTEST_SKIP() << "chromium not installed (apt-get install chromium); set TIERSERVE_REQUIRE_CHROMIUM=1 to require it";
  }
  const Report r = sample_report();
  ASSERT_FALSE(r.sweep.empty());
  const std::string dir = std::string(TS_BINARY_DIR) + "/bench_html_test";
  ASSERT_EQ(std::system(("mkdir -p '" + dir + "'").c_str()), 0);
  const std::string path = dir + "/report.html";
  {
    std::ofstream out(path);
    out << to_html(r);
  }
  // --no-sandbox: tests may run as root in containers. A private profile directory
  // keeps runs independent.
  const std::string cmd = chromium + " --headless --no-sandbox --disable-gpu --user-data-dir='" + dir +
                          "/profile' --virtual-time-budget=5000 --dump-dom 'file://" + path + "' 2>/dev/null";
  const std::string dom = run_capture(cmd);
  ASSERT_NE(dom.find("data-rendered=\"1\""), std::string::npos) << "scripts did not finish:\n" << dom.substr(0, 2000);
  // Four charts, each an <svg class="chart">.
  for (const char* id : {"cdf-ttft", "cdf-e2e", "curve", "over-time"})
    EXPECT_NE(dom.find(std::string("data-chart=\"") + id + "\""), std::string::npos) << id;
  EXPECT_EQ(count(dom, "<svg"), 4u);
  // CDFs: a series per tier in each; the curve one; over time one per tier.
  EXPECT_EQ(count(dom, "data-series=\"ultrafast\""), 3u);
  EXPECT_EQ(count(dom, "data-series=\"standard\""), 3u);
  EXPECT_EQ(count(dom, "data-series=\"P99 ttft\""), 1u);
  // The curve has one marker per sweep step, and the knee is drawn when one was found.
  EXPECT_GE(count(dom, "class=\"point\""), r.sweep.size());
  EXPECT_EQ(count(dom, "class=\"knee\""), r.knee_index >= 0 ? 1u : 0u);
  // Paths have real coordinates (no NaN from bad data).
  EXPECT_EQ(dom.find("NaN"), std::string::npos);
  std::smatch m;
  EXPECT_TRUE(std::regex_search(dom, m, std::regex("class=\"series\"[^>]*|d=\"M[0-9.]+ [0-9.]+ L")));
}

}  // namespace
}  // namespace ts::bench
