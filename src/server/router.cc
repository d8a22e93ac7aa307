#include "server/router.h"

#include "server/api_error.h"

namespace ts::server {

void Router::add(std::string method, std::string path, Handler h) {
  routes_.push_back({std::move(method), std::move(path), std::move(h), false});
}

void Router::add_prefix(std::string method, std::string prefix, Handler h) {
  routes_.push_back({std::move(method), std::move(prefix), std::move(h), true});
}

bool Router::has_path(const std::string& path) const {
  for (const auto& r : routes_)
    if (!r.prefix && r.path == path) return true;
  return false;
}

void Router::dispatch(const HttpRequest& req, std::shared_ptr<Responder> out) const {
  std::string allow;
  const bool exact = has_path(req.path);
  for (const auto& r : routes_) {
    if (!matches(r, req.path) || (exact && r.prefix)) continue;
    if (r.method == req.method || (req.method == "HEAD" && r.method == "GET")) {
      r.handler(req, std::move(out));
      return;
    }
    allow += (allow.empty() ? "" : ", ") + r.method;
  }
  if (!allow.empty()) {
    ApiError e;
    e.status = 405;
    e.message = "method " + req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")";
    e.code = "method_not_allowed";
    HttpResponse r = error_response(e);
    r.headers.emplace_back("Allow", allow);
    out->respond(std::move(r));
    return;
  }
  out->respond(error_response(not_found_error("no route for " + req.method + " " + req.path)));
}

HttpResponse error_response(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = e.to_json();
  if (e.retry_after_ms > 0 || e.status == 429 || e.status == 503)
    r.headers.emplace_back("Retry-After", retry_after_seconds(e.retry_after_ms));
  return r;
}

}  // namespace ts::server
