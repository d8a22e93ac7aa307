// Exact-path routing by method: a table of (method, path) -> handler. An unknown path is
// 404 and a known path with another method 405 (with Allow), as OpenAI error objects.
#pragma once

#include <string>
#include <vector>

#include "server/http_types.h"

namespace ts::server {

class Router {
 public:
  void add(std::string method, std::string path, Handler h);
  // Paths that start with `prefix` and go on (e.g. "/v1/models/" for /v1/models/{id});
  // tried after the exact paths.
  void add_prefix(std::string method, std::string prefix, Handler h);
  // Calls the matching handler, or answers 404/405 itself.
  void dispatch(const HttpRequest& req, std::shared_ptr<Responder> out) const;
  bool has_path(const std::string& path) const;

 private:
  struct Route {
    std::string method, path;
    Handler handler;
    bool prefix = false;
  };
  bool matches(const Route& r, const std::string& path) const {
    return r.prefix ? path.size() > r.path.size() && path.compare(0, r.path.size(), r.path) == 0 : path == r.path;
  }
  std::vector<Route> routes_;
};

// A JSON error response (the OpenAI error object) with Retry-After when asked for.
struct ApiError;
HttpResponse error_response(const ApiError& e);

}  // namespace ts::server
