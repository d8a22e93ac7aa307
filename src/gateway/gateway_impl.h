// What the gateway's .cc files share (not a public header): the metric ids, one proxied
// request's state (Exchange), a shadow pair, and the JSON and header helpers.
//   gateway.cc   the fleet's setup, routes, the ticker, drain, admin and health routes
//   exchange.cc  a request's way: admission, placement, the upstream call, the relay, the end
//   answers.cc   answers kept or compared: the response cache and shadow pairs
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <nlohmann/json.hpp>

#include "gateway/gateway.h"
#include "gateway/pair_store.h"
#include "server/access_log.h"
#include "server/api_error.h"

namespace ts::gateway {

enum M : size_t {
  kRequests,
  kRouteDecisions,
  kDegradations,
  kPlacements,
  kRetries,
  kWorkerErrors,
  kWorkerUp,
  kWorkerInflight,
  kWorkerRestarts,
  kQueueDepth,
  kQueueDepthTotal,
  kQueueSeconds,
  kTtftSeconds,
  kSharedLimits,
  kSharedLimitErrors,
  kCacheRequests,
  kCacheEvictions,
  kCacheBytes,
  kCacheEntries,
  kCanaryDecisions,
  kShadow,
  kCacheErrors,
  kCount
};

// A shadow pair: the client's answer and the shadow version's, written once both are in.
struct ShadowPair {
  std::mutex mu;
  PairRow row;
  int sides = 0;
};

struct Gateway::Exchange {
  Gateway* g = nullptr;
  std::shared_ptr<server::Responder> out;
  server::AccessRecord* rec = nullptr;
  server::KeyState* key = nullptr;         // charged locally (this replica's buckets)
  server::KeyState* shared_key = nullptr;  // charged in Redis (every replica's), under lease_id
  std::string lease_id;
  bool limits_local = false;               // Redis was unavailable: limited here only (fail open)
  std::mutex mu;

  // The request.
  nlohmann::json body;
  bool stream = false, chat = true;
  std::string path;  // upstream path
  std::string request_id, traceparent;
  int tier_requested = 0, tier = 0;
  int model = 0, fallback_model = -1;  // served model names' indices
  int unit = 0, fallback_unit = -1;    // their versions' (the fleet's models: Releases::units)
  std::string version;                 // of the unit that serves it ("" unversioned)
  int64_t placed_ns = 0;               // the last attempt's start on a worker
  std::shared_ptr<ShadowPair> pair;    // mirrored to a shadow version: this side's answer goes in it
  std::string answer_text;             // with a pair: the answer the client got
  bool timed_out = false;              // the worker did not answer within a timeout
  std::string route;        // x-tierserve-route ("" unless the router chose)
  std::string degraded_reason;
  int64_t charged_tokens = 0, max_tokens = 0, prompt_tokens = 0;
  int64_t arrived_ns = 0;

  // Its state.
  uint64_t ticket = 0;
  bool queued = false;      // a ticket waits in the fleet
  bool placed = false;      // an attempt is under way
  Placement pl;
  std::shared_ptr<UpstreamCall> call;
  int attempts = 0;
  bool aborted = false;     // the gateway ended the call (worker unreachable)
  bool client_gone = false;
  bool client_started = false;  // stream headers sent
  bool ended = false;
  int64_t body_bytes = 0;   // of the worker's response, forwarded
  int status = 0;
  server::Headers up_headers;
  std::string buffered;     // non-stream or error bodies
  int64_t last_notice_ns = 0;
  int64_t first_byte_ns = 0;
  int64_t completion_tokens = -1, content_chunks = 0;
  std::string sse_tail;     // an incomplete SSE event (peeked for usage; rewritten when needed)
  bool rewrite_model = false;
  // The response cache: the entry's key ("" not cacheable), and the answer as it streams.
  std::string cache_key;
  bool include_usage = false;
  bool cache_spoiled = false;  // an error event, a fallback model: not stored
  std::string cached_text, cached_finish;
  int64_t usage_prompt = -1;
};

namespace internal {

std::string answer_text(const nlohmann::json& j, bool chat);
std::string conversation_of(const nlohmann::json& b, bool chat);
bool hop_by_hop(const std::string& n);
std::string header_of(const server::Headers& h, const std::string& name);
std::string prompt_text(const nlohmann::json& body, bool chat);
server::ApiError refusal_error(Refusal r, const std::string& message);

}  // namespace internal

// The names the three files use unqualified.
using nlohmann::json;
using server::ApiError;
using server::HttpRequest;
using server::HttpResponse;
using server::Responder;
using namespace internal;

}  // namespace ts::gateway
