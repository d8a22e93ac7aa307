// Shadow pairs and blind-review verdicts in SQLite (docs/gateway.md: shadow traffic and
// review). The gateway appends pairs from a writer thread of its own (a slow, locked or
// broken database never holds a request: a full queue drops the pair, counted); `tierserve
// review` reads pairs, stores verdicts and reports win rates. The file holds two tables:
//   pairs(id, at_ms, model, endpoint, request, <side>_version, <side>_status, <side>_text,
//         <side>_ttft_ms, <side>_latency_ms, <side>_completion_tokens, <side>_cost, <side>_error)
//         for side in stable, shadow;
//   verdicts(id, pair_id, reviewer, winner ('stable', 'shadow' or 'tie'), at_ms).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/status.h"

struct sqlite3;

namespace ts::gateway {

struct PairSide {
  std::string version;
  int status = 0;
  std::string text, error;
  double ttft_ms = -1, latency_ms = -1, cost = 0;
  int64_t completion_tokens = -1;
};

struct PairRow {
  int64_t at_ms = 0;
  std::string model, endpoint, request;  // request: the client's JSON body
  PairSide stable, shadow;
};

// One connection to the file, WAL mode, a short busy timeout. Not thread-safe: one owner.
class PairDb {
 public:
  static Result<std::unique_ptr<PairDb>> open(const std::string& path);
  ~PairDb();
  Status insert(const PairRow& r, int64_t max_rows);  // the oldest beyond max_rows go
  // A pair `reviewer` has not judged, both answers whole (status 200), or nullopt.
  struct Pending {
    int64_t id = 0;
    std::string prompt, stable_text, shadow_text;
  };
  Result<std::optional<Pending>> next_for(const std::string& reviewer);
  // winner: stable, shadow or tie. kNotFound for a pair that does not exist.
  Status add_verdict(int64_t pair_id, const std::string& reviewer, const std::string& winner);
  // Per version pair: verdicts, wins each side, ties, the shadow's win rate among decided
  // verdicts with a 95% Wilson interval, and both sides' latency and cost over the judged pairs.
  Result<nlohmann::json> report();
  int64_t count_pairs();

 private:
  explicit PairDb(sqlite3* db) : db_(db) {}
  Status exec(const char* sql);
  sqlite3* db_;
};

// The gateway's writer: a bounded queue and a thread that inserts. Errors are reported
// through `on_error` (a counter and a log line), never to a request.
class PairWriter {
 public:
  // on_written: a pair is in the file (called on the writer's thread).
  PairWriter(std::string path, int64_t max_rows, std::function<void(const std::string& kind, const std::string& msg)> on_error,
             std::function<void(const PairRow&)> on_written = nullptr);
  ~PairWriter();
  // False when the queue is full (the pair is dropped).
  bool push(PairRow r);
  void flush();  // waits until the queue is empty (tests, drain)
  static constexpr size_t kMaxQueued = 1024;

 private:
  void run();
  std::string path_;
  int64_t max_rows_;
  std::function<void(const std::string&, const std::string&)> on_error_;
  std::function<void(const PairRow&)> on_written_;
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<PairRow> q_;  // GUARDED_BY(mu_)
  bool stop_ = false, busy_ = false;
  std::thread t_;
};

}  // namespace ts::gateway
