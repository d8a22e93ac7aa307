#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace ts::server {

std::string ApiError::to_json() const {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  // Messages may quote client input; replace invalid UTF-8 rather than throw.
  return nlohmann::json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError unauthorized(std::string message) {
  ApiError e;
  e.status = 401;
  e.type = "authentication_error";
  e.code = "invalid_api_key";
  e.message = std::move(message);
  return e;
}

ApiError not_found_error(std::string message) {
  ApiError e;
  e.status = 404;
  e.type = "not_found_error";
  e.code = "not_found";
  e.message = std::move(message);
  return e;
}

ApiError model_not_found(const std::string& name) {
  ApiError e;
  e.status = 404;
  e.type = "invalid_request_error";
  e.param = "model";
  e.code = "model_not_found";
  e.message = "The model '" + name + "' does not exist";
  return e;
}

ApiError server_error(int status, std::string message, std::string code) {
  ApiError e;
  e.status = status;
  e.type = status == 429 ? "rate_limit_error" : "server_error";
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

ApiError tier_not_entitled(const std::string& tier) {
  ApiError e;
  e.status = 403;
  e.type = "permission_error";
  e.code = "tier_not_entitled";
  e.param = "service_tier";
  e.message = "this API key may not use tier '" + tier + "'";
  return e;
}

}  // namespace ts::server
