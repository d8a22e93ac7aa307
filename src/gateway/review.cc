#include "gateway/review.h"

#include <cstdio>

#include "server/api_error.h"

namespace ts::gateway {

using json = nlohmann::json;
using server::HttpRequest;
using server::HttpResponse;
using server::Responder;

namespace {

// The page: plain HTML, CSS and script inline (it works offline, and a headless browser
// drives it by its element ids).
const char* kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>tierserve blind review</title>
<style>
body{font-family:system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em;color:#222}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.8em;border-radius:4px}
.answers{display:flex;gap:1em}.answers>div{flex:1}
button{font-size:1.1em;padding:.4em 1.2em;margin-right:.5em}
#status{color:#555}
</style></head><body>
<h1>Which answer is better?</h1>
<p>Reviewer: <input id="reviewer" placeholder="your name"> <button id="start">Start</button> <span id="status"></span></p>
<div id="pair" hidden>
<h2>Prompt</h2><pre id="prompt"></pre>
<div class="answers"><div><h2>A</h2><pre id="answer-a"></pre></div><div><h2>B</h2><pre id="answer-b"></pre></div></div>
<p><button id="pick-a">A is better</button><button id="pick-b">B is better</button><button id="pick-tie">Tie</button></p>
</div>
<p><a href="/report">Report</a></p>
<script>
let token = null, judged = 0;
const $ = (id) => document.getElementById(id);
function say(t) { $('status').textContent = t; }
async function next() {
  const r = await fetch('/api/next', {method: 'POST', body: JSON.stringify({reviewer: $('reviewer').value})});
  const j = await r.json();
  if (!r.ok) { say(j.error ? j.error.message : 'error'); return; }
  if (j.done) { token = null; $('pair').hidden = true; say('done: ' + judged + ' judged, nothing left'); document.body.dataset.done = '1'; return; }
  token = j.token;
  $('prompt').textContent = j.prompt; $('answer-a').textContent = j.a; $('answer-b').textContent = j.b;
  $('pair').hidden = false; say(judged + ' judged'); document.body.dataset.showing = String(judged);
}
async function pick(choice) {
  if (!token) return;
  const r = await fetch('/api/verdict', {method: 'POST', body: JSON.stringify({token, reviewer: $('reviewer').value, choice})});
  if (!r.ok) { const j = await r.json(); say(j.error ? j.error.message : 'error'); return; }
  judged++; document.body.dataset.judged = String(judged); next();
}
$('start').onclick = next;
$('pick-a').onclick = () => pick('a'); $('pick-b').onclick = () => pick('b'); $('pick-tie').onclick = () => pick('tie');
</script></body></html>
)HTML";

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

void respond_error(const std::shared_ptr<Responder>& out, int status, const std::string& message, const std::string& code) {
  server::ApiError e = server::server_error(status, message, code);
  if (status < 500) e.type = "invalid_request_error";
  out->respond(server::error_response(e));
}

std::string num(const json& v, const char* fmt) {
  if (!v.is_number()) return "–";
  char b[64];
  std::snprintf(b, sizeof b, fmt, v.get<double>());
  return b;
}

}  // namespace

ReviewApp::ReviewApp(std::unique_ptr<PairDb> db) : db_(std::move(db)), rng_(std::random_device{}()) {
  using H = std::shared_ptr<Responder>;
  routes_.add("GET", "/", [this](const HttpRequest&, H o) { page(std::move(o)); });
  routes_.add("POST", "/api/next", [this](const HttpRequest& q, H o) { next(q, std::move(o)); });
  routes_.add("POST", "/api/verdict", [this](const HttpRequest& q, H o) { verdict(q, std::move(o)); });
  routes_.add("GET", "/report", [this](const HttpRequest&, H o) { report(std::move(o), true); });
  routes_.add("GET", "/report.json", [this](const HttpRequest&, H o) { report(std::move(o), false); });
}

void ReviewApp::page(std::shared_ptr<Responder> out) const {
  HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = kPage;
  out->respond(std::move(r));
}

namespace {
// A reviewer's name: 1 to 64 printable characters.
bool good_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (unsigned char c : n)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}
}  // namespace

void ReviewApp::next(const HttpRequest& req, std::shared_ptr<Responder> out) {
  const json b = json::parse(req.body, nullptr, false);
  if (!b.is_object() || !b.contains("reviewer") || !b["reviewer"].is_string() || !good_name(b["reviewer"].get<std::string>()))
    return respond_error(out, 400, "name the reviewer (1 to 64 printable characters)", "invalid_reviewer");
  const std::string reviewer = b["reviewer"].get<std::string>();
  std::lock_guard<std::mutex> lk(mu_);
  auto p = db_->next_for(reviewer);
  if (!p.is_ok()) {
    const bool busy = p.status().code() == StatusCode::kUnavailable;
    return respond_error(out, busy ? 503 : 500, "the pair database: " + p.status().message(), busy ? "db_locked" : "db_error");
  }
  HttpResponse r;
  if (!p->has_value()) {
    r.body = json{{"done", true}}.dump();
    return out->respond(std::move(r));
  }
  const PairDb::Pending& pend = **p;
  // The same pair is shown again until judged; its order is drawn each time it is shown.
  const bool a_is_shadow = std::bernoulli_distribution(0.5)(rng_);
  char tok[33];
  std::snprintf(tok, sizeof tok, "%016llx%016llx", (unsigned long long)rng_(), (unsigned long long)rng_());
  if (shown_.size() >= kMaxOpen) shown_.erase(shown_.begin());
  shown_[tok] = {pend.id, a_is_shadow, reviewer};
  r.body = json{{"token", tok},
                {"prompt", pend.prompt},
                {"a", a_is_shadow ? pend.shadow_text : pend.stable_text},
                {"b", a_is_shadow ? pend.stable_text : pend.shadow_text}}
               .dump(-1, ' ', false, json::error_handler_t::replace);
  out->respond(std::move(r));
}

void ReviewApp::verdict(const HttpRequest& req, std::shared_ptr<Responder> out) {
  const json b = json::parse(req.body, nullptr, false);
  if (!b.is_object()) return respond_error(out, 400, "the body must be {token, reviewer, choice}", "invalid_json");
  const std::string choice = b.value("choice", std::string()), token = b.value("token", std::string()),
                    reviewer = b.value("reviewer", std::string());
  if (choice != "a" && choice != "b" && choice != "tie") return respond_error(out, 400, "choice: a, b or tie", "invalid_choice");
  std::lock_guard<std::mutex> lk(mu_);
  auto it = shown_.find(token);
  if (it == shown_.end()) return respond_error(out, 404, "no pair was shown under this token", "unknown_pair");
  if (it->second.reviewer != reviewer) return respond_error(out, 403, "the pair was shown to another reviewer", "wrong_reviewer");
  const std::string winner = choice == "tie" ? "tie" : (choice == "a") == it->second.a_is_shadow ? "shadow" : "stable";
  const Status st = db_->add_verdict(it->second.pair_id, reviewer, winner);
  if (st.code() == StatusCode::kNotFound) {
    shown_.erase(it);
    return respond_error(out, 404, st.message(), "unknown_pair");
  }
  if (!st.is_ok()) {
    const bool busy = st.code() == StatusCode::kUnavailable;
    return respond_error(out, busy ? 503 : 500, "the pair database: " + st.message(), busy ? "db_locked" : "db_error");
  }
  shown_.erase(it);
  HttpResponse r;
  r.body = json{{"ok", true}}.dump();
  out->respond(std::move(r));
}

void ReviewApp::report(std::shared_ptr<Responder> out, bool html) {
  Result<json> rep = [&] {
    std::lock_guard<std::mutex> lk(mu_);
    return db_->report();
  }();
  if (!rep.is_ok()) return respond_error(out, 500, "the pair database: " + rep.status().message(), "db_error");
  HttpResponse r;
  if (!html) {
    r.body = rep->dump();
    return out->respond(std::move(r));
  }
  std::string h =
      "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>tierserve review report</title>"
      "<style>body{font-family:system-ui,sans-serif;margin:2em}td,th{padding:.3em .8em;border-bottom:1px solid #ddd;text-align:right}"
      "th:first-child,td:first-child{text-align:left}</style></head><body><h1>Blind review</h1><p>" +
      std::to_string((*rep)["pairs"].get<int64_t>()) +
      " pairs recorded.</p><table id=\"report\"><tr><th>model</th><th>stable</th><th>shadow</th><th>verdicts</th><th>shadow wins</th>"
      "<th>stable wins</th><th>ties</th><th>shadow win rate (95% CI)</th><th>median latency ms stable / shadow</th>"
      "<th>cost per 1000 stable / shadow</th></tr>";
  for (const json& c : (*rep)["comparisons"]) {
    h += "<tr class=\"comparison\"><td>" + escape(c["model"]) + "</td><td>" + escape(c["stable_version"]) + "</td><td>" +
         escape(c["shadow_version"]) + "</td><td class=\"verdicts\">" + std::to_string(c["verdicts"].get<int64_t>()) + "</td><td>" +
         std::to_string(c["shadow_wins"].get<int64_t>()) + "</td><td>" + std::to_string(c["stable_wins"].get<int64_t>()) + "</td><td>" +
         std::to_string(c["ties"].get<int64_t>()) + "</td><td>" + num(c["shadow_win_rate"], "%.2f") + " (" +
         num(c["shadow_win_rate_ci95"][0], "%.2f") + "–" + num(c["shadow_win_rate_ci95"][1], "%.2f") + ")</td><td>" +
         num(c["latency_ms_median"]["stable"], "%.1f") + " / " + num(c["latency_ms_median"]["shadow"], "%.1f") + "</td><td>" +
         num(c["cost_per_1000"]["stable"], "%.4g") + " / " + num(c["cost_per_1000"]["shadow"], "%.4g") + "</td></tr>";
  }
  h += "</table></body></html>";
  r.content_type = "text/html; charset=utf-8";
  r.body = std::move(h);
  out->respond(std::move(r));
}

}  // namespace ts::gateway
