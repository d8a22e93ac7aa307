// The self-contained HTML report: the results as embedded JSON and a small inline
// script that draws the charts as SVG (no network, no external libraries). The page's
// static markup holds no SVG; the script creates it and marks <body data-rendered="1">,
// so a headless browser's DOM shows whether the charts really rendered.
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/report.h"

namespace ts::bench {

namespace {

using nlohmann::json;

// JSON inside <script>: "</" would end the element early.
std::string script_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') {
      out += "<\\/";
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

// Per series: sorted latencies for the CDFs.
json cdf_data(const Report& r) {
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by;
  for (const auto& rec : r.records) {
    if (rec.phase != r.steady.phase || !rec.ok()) continue;
    std::string name = rec.tier_requested.empty() ? "default" : rec.tier_requested;
    if (r.has_compare) name = rec.target + " " + name;
    if (!std::isnan(rec.ttft_ms())) by[name].first.push_back(rec.ttft_ms());
    by[name].second.push_back(rec.e2e_ms());
  }
  json out = json::array();
  for (auto& [name, v] : by) {
    std::sort(v.first.begin(), v.first.end());
    std::sort(v.second.begin(), v.second.end());
    out.push_back({{"name", name}, {"ttft_ms", v.first}, {"e2e_ms", v.second}});
  }
  return out;
}

json series_data(const PhaseStats& p, const std::string& prefix) {
  json out = json::array();
  for (const auto& s : p.series) {
    json pts = json::array();
    for (size_t i = 0; i < s.t_s.size(); ++i)
      if (std::isfinite(s.ttft_ms[i])) pts.push_back({s.t_s[i], s.ttft_ms[i]});
    out.push_back({{"name", prefix + s.tier}, {"points", pts}});
  }
  return out;
}

const char* kScript = R"JS(
(function () {
  const D = JSON.parse(document.getElementById('bench-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  const COLORS = ['#9467bd', '#ff7f0e', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];
  const FIXED = {ultrafast: '#d62728', standard: '#1f77b4', batch: '#2ca02c', default: '#555555'};
  const assigned = {};
  // One color per tier in every chart (compare mode prefixes the target; the tier
  // keeps its hue family through a per-name slot).
  function color(name) {
    if (assigned[name]) return assigned[name];
    const tier = name.split(' ').pop();
    const taken = Object.values(assigned);
    let c = FIXED[name] || (FIXED[tier] && !taken.includes(FIXED[tier]) ? FIXED[tier] : null);
    if (!c) c = COLORS[Object.keys(assigned).length % COLORS.length];
    assigned[name] = c;
    return c;
  }
  function el(tag, attrs, parent, text) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function ticks(lo, hi, n) {
    const span = hi - lo || 1, step0 = span / n, mag = Math.pow(10, Math.floor(Math.log10(step0)));
    const step = [1, 2, 5, 10].map(m => m * mag).find(s => span / s <= n) || mag * 10;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(+v.toPrecision(6));
    return out;
  }
  // series: [{name, points: [[x, y], ...]}]; opts: {title, x, y, knee: [x, y], markers}
  function chart(id, series, opts) {
    const host = document.getElementById(id);
    const W = 640, H = 360, L = 64, R = 150, T = 30, B = 48;
    const svg = el('svg', {width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: 'chart', 'data-chart': id}, host);
    el('text', {x: L, y: 18, class: 'title'}, svg, opts.title);
    const all = series.flatMap(s => s.points);
    if (!all.length) {
      el('text', {x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty'}, svg, 'no data');
      return svg;
    }
    let x0 = Math.min(...all.map(p => p[0])), x1 = Math.max(...all.map(p => p[0]));
    let y0 = opts.y0 !== undefined ? opts.y0 : Math.min(0, ...all.map(p => p[1])), y1 = Math.max(...all.map(p => p[1]));
    if (x1 === x0) x1 = x0 + 1;
    if (y1 === y0) y1 = y0 + 1;
    const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R), sy = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
    const axes = el('g', {class: 'axes'}, svg);
    el('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#333'}, axes);
    el('line', {x1: L, y1: T, x2: L, y2: H - B, stroke: '#333'}, axes);
    for (const t of ticks(x0, x1, 6)) {
      el('line', {x1: sx(t), y1: H - B, x2: sx(t), y2: H - B + 4, stroke: '#333'}, axes);
      el('text', {x: sx(t), y: H - B + 16, 'text-anchor': 'middle'}, axes, String(t));
    }
    for (const t of ticks(y0, y1, 5)) {
      el('line', {x1: L - 4, y1: sy(t), x2: W - R, y2: sy(t), stroke: '#eee'}, axes);
      el('text', {x: L - 6, y: sy(t) + 4, 'text-anchor': 'end'}, axes, String(t));
    }
    el('text', {x: (L + W - R) / 2, y: H - 8, 'text-anchor': 'middle'}, axes, opts.x);
    el('text', {x: 14, y: (T + H - B) / 2, transform: `rotate(-90 14 ${(T + H - B) / 2})`, 'text-anchor': 'middle'}, axes, opts.y);
    series.forEach((s, i) => {
      const c = color(s.name);
      if (!s.points.length) return;
      const d = s.points.map((p, k) => (k ? 'L' : 'M') + sx(p[0]).toFixed(1) + ' ' + sy(p[1]).toFixed(1)).join(' ');
      el('path', {d: d, fill: 'none', stroke: c, 'stroke-width': 2, class: 'series', 'data-series': s.name}, svg);
      if (opts.markers) for (const p of s.points) el('circle', {cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: c, class: 'point'}, svg);
      el('rect', {x: W - R + 12, y: T + i * 18, width: 12, height: 12, fill: c}, svg);
      el('text', {x: W - R + 30, y: T + i * 18 + 11, class: 'legend'}, svg, s.name);
    });
    if (opts.knee) {
      const [kx, ky] = opts.knee;
      el('circle', {cx: sx(kx), cy: sy(ky), r: 7, fill: 'none', stroke: '#000', 'stroke-width': 2, class: 'knee'}, svg);
      el('text', {x: sx(kx) + 10, y: sy(ky) - 10, class: 'knee-label'}, svg, 'knee');
    }
    return svg;
  }
  function cdf(values) {
    const n = values.length;
    const pts = n ? [[values[0], 0]] : [];
    values.forEach((v, i) => pts.push([v, (i + 1) / n * 100]));
    return pts;
  }
  chart('cdf-ttft', D.cdf.map(s => ({name: s.name, points: cdf(s.ttft_ms)})),
        {title: 'TTFT CDF per tier', x: 'TTFT (ms, from the scheduled send time)', y: 'percent of requests', y0: 0});
  chart('cdf-e2e', D.cdf.map(s => ({name: s.name, points: cdf(s.e2e_ms)})),
        {title: 'End-to-end latency CDF per tier', x: 'end-to-end latency (ms)', y: 'percent of requests', y0: 0});
  const curve = D.curve.map(p => [p.throughput_rps, p.p99_ms]);
  chart('curve', curve.length ? [{name: 'P99 ' + D.curve_metric, points: curve}] : [],
        {title: 'Throughput vs P99 ' + D.curve_metric + (D.knee >= 0 ? ' (knee at ' + D.curve[D.knee].offered + ' ' + D.curve_unit + ')' : ''),
         x: 'throughput (requests/s)', y: 'P99 ' + D.curve_metric + ' (ms)', markers: true,
         knee: D.knee >= 0 ? curve[D.knee] : null, y0: 0});
  chart('over-time', D.series, {title: 'Mean TTFT over time per tier', x: 'time (s)', y: 'TTFT (ms)', markers: true, y0: 0});
  document.body.setAttribute('data-rendered', '1');
})();
)JS";

const char* kStyle = R"CSS(
body { font-family: sans-serif; margin: 24px; color: #222; }
pre { background: #f6f6f6; padding: 12px; overflow-x: auto; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
svg.chart { border: 1px solid #ddd; background: #fff; }
svg text { font-size: 11px; }
svg text.title { font-size: 13px; font-weight: bold; }
)CSS";

}  // namespace

std::string to_html(const Report& r) {
  json data;
  data["cdf"] = cdf_data(r);
  json curve = json::array();
  for (const auto& p : sweep_curve(r))
    if (std::isfinite(p.p99_ms)) curve.push_back({{"offered", p.offered}, {"throughput_rps", p.throughput_rps}, {"p99_ms", p.p99_ms}});
  data["curve"] = curve;
  data["curve_metric"] = r.sweep_metric;
  data["curve_unit"] = r.sweep_unit;
  data["knee"] = curve.size() == r.sweep.size() ? r.knee_index : -1;
  json series = r.has_compare ? series_data(r.compare.a, r.compare.label_a + " ") : series_data(r.steady, "");
  if (r.has_compare)
    for (auto& s : series_data(r.compare.b, r.compare.label_b + " ")) series.push_back(s);
  data["series"] = series;
  data["report"] = json::parse(to_json(r));

  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tierserve bench report</title>\n";
  h += "<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n";
  h += "<h1>tierserve bench</h1>\n<p>" + html_escape(r.target_url) + " &mdash; " + html_escape(r.mode) + "</p>\n";
  h += "<div class=\"charts\">\n";
  for (const char* id : {"cdf-ttft", "cdf-e2e", "curve", "over-time"})
    h += std::string("<div id=\"") + id + "\"></div>\n";
  h += "</div>\n<h2>Summary</h2>\n<pre>" + html_escape(format_summary(r)) + "</pre>\n";
  h += "<script type=\"application/json\" id=\"bench-data\">" + script_safe(data.dump()) + "</script>\n";
  h += "<script>" + std::string(kScript) + "</script>\n</body>\n</html>\n";
  return h;
}

}  // namespace ts::bench
