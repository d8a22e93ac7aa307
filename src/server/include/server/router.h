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
  // Calls the matching handler, or answers 404/405 itself.
  void dispatch(const HttpRequest& req, std::shared_ptr<Responder> out) const;
  bool has_path(const std::string& path) const;

 private:
  struct Route {
    std::string method, path;
    Handler handler;
  };
  std::vector<Route> routes_;
};

// A JSON error response (the OpenAI error object) with Retry-After when asked for.
struct ApiError;
HttpResponse error_response(const ApiError& e);

}  // namespace ts::server
