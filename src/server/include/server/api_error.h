// OpenAI-style errors: an HTTP status plus {"error": {"message", "type", "param", "code"}}.
// The same object is the body of an error response and, inside a stream, one data event.
#pragma once

#include <cstdint>
#include <string>

namespace ts::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;               // the request field at fault ("" -> null)
  std::string code;                // machine-readable ("" -> null)
  int64_t retry_after_ms = 0;      // > 0: a Retry-After header (seconds, rounded up)

  // {"error":{...}} as compact JSON.
  std::string to_json() const;
};

ApiError bad_request(std::string message, std::string param = "", std::string code = "");
ApiError unauthorized(std::string message);
ApiError not_found_error(std::string message);
ApiError server_error(int status, std::string message, std::string code);
// 404 model_not_found, OpenAI's answer to an unknown "model".
ApiError model_not_found(const std::string& name);
// 403 permission_error tier_not_entitled (param service_tier): the key may not use `tier`.
ApiError tier_not_entitled(const std::string& tier);

}  // namespace ts::server
