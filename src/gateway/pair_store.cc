#include "gateway/pair_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

namespace ts::gateway {

using json = nlohmann::json;

namespace {

const char* kSchema =
    "CREATE TABLE IF NOT EXISTS pairs ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, model TEXT NOT NULL, endpoint TEXT NOT NULL,"
    " request TEXT NOT NULL,"
    " stable_version TEXT, stable_status INTEGER, stable_text TEXT, stable_ttft_ms REAL, stable_latency_ms REAL,"
    " stable_completion_tokens INTEGER, stable_cost REAL, stable_error TEXT,"
    " shadow_version TEXT, shadow_status INTEGER, shadow_text TEXT, shadow_ttft_ms REAL, shadow_latency_ms REAL,"
    " shadow_completion_tokens INTEGER, shadow_cost REAL, shadow_error TEXT);"
    "CREATE TABLE IF NOT EXISTS verdicts ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, pair_id INTEGER NOT NULL REFERENCES pairs(id) ON DELETE CASCADE,"
    " reviewer TEXT NOT NULL, winner TEXT NOT NULL CHECK (winner IN ('stable', 'shadow', 'tie')), at_ms INTEGER NOT NULL,"
    " UNIQUE (pair_id, reviewer));";

// A prepared statement, finalized on scope exit.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

Status db_error(sqlite3* db, const std::string& what) {
  const int code = sqlite3_errcode(db);
  const std::string m = what + ": " + sqlite3_errmsg(db);
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED) return {StatusCode::kUnavailable, m};
  return {StatusCode::kIo, m};
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string col_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? std::string(reinterpret_cast<const char*>(t), size_t(sqlite3_column_bytes(s, i))) : std::string();
}

// The text a reviewer judges: the chat's messages or the completion's prompt.
std::string prompt_of(const std::string& request) {
  const json b = json::parse(request, nullptr, false);
  if (b.is_discarded() || !b.is_object()) return request;
  if (b.contains("messages") && b["messages"].is_array()) {
    std::string out;
    for (const json& m : b["messages"])
      if (m.is_object()) out += m.value("role", std::string("?")) + ": " + (m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>() : m.value("content", json()).dump()) + "\n";
    return out;
  }
  if (b.contains("prompt")) return b["prompt"].is_string() ? b["prompt"].get<std::string>() : b["prompt"].dump();
  return request;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

Result<std::unique_ptr<PairDb>> PairDb::open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    Status st = db_error(db, "cannot open " + path);
    sqlite3_close(db);
    return st;
  }
  std::unique_ptr<PairDb> p(new PairDb(db));
  sqlite3_busy_timeout(db, 200);
  // A file that is not a database fails here, on its first read.
  for (const char* sql : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=NORMAL;", "PRAGMA foreign_keys=ON;", kSchema})
    if (Status st = p->exec(sql); !st.is_ok()) return Status(st.code(), path + ": " + st.message());
  return p;
}

PairDb::~PairDb() { sqlite3_close(db_); }

Status PairDb::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    Status st = db_error(db_, err ? err : "sqlite");
    sqlite3_free(err);
    return st;
  }
  return Status::ok();
}

Status PairDb::insert(const PairRow& r, int64_t max_rows) {
  Stmt st;
  const char* sql =
      "INSERT INTO pairs (at_ms, model, endpoint, request, stable_version, stable_status, stable_text, stable_ttft_ms,"
      " stable_latency_ms, stable_completion_tokens, stable_cost, stable_error, shadow_version, shadow_status, shadow_text,"
      " shadow_ttft_ms, shadow_latency_ms, shadow_completion_tokens, shadow_cost, shadow_error)"
      " VALUES (?,?,?,?, ?,?,?,?,?,?,?,?, ?,?,?,?,?,?,?,?)";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return db_error(db_, "prepare insert");
  int i = 1;
  auto text = [&](const std::string& v) { sqlite3_bind_text(st.s, i++, v.data(), int(v.size()), SQLITE_TRANSIENT); };
  sqlite3_bind_int64(st.s, i++, r.at_ms);
  text(r.model);
  text(r.endpoint);
  text(r.request);
  for (const PairSide* s : {&r.stable, &r.shadow}) {
    text(s->version);
    sqlite3_bind_int(st.s, i++, s->status);
    text(s->text);
    sqlite3_bind_double(st.s, i++, s->ttft_ms);
    sqlite3_bind_double(st.s, i++, s->latency_ms);
    sqlite3_bind_int64(st.s, i++, s->completion_tokens);
    sqlite3_bind_double(st.s, i++, s->cost);
    text(s->error);
  }
  if (sqlite3_step(st.s) != SQLITE_DONE) return db_error(db_, "insert a pair");
  const int64_t id = sqlite3_last_insert_rowid(db_);
  if (max_rows > 0 && id > max_rows) {
    Stmt del;
    if (sqlite3_prepare_v2(db_, "DELETE FROM pairs WHERE id <= ?", -1, &del.s, nullptr) != SQLITE_OK) return db_error(db_, "prepare delete");
    sqlite3_bind_int64(del.s, 1, id - max_rows);
    if (sqlite3_step(del.s) != SQLITE_DONE) return db_error(db_, "bound the pairs");
  }
  return Status::ok();
}

int64_t PairDb::count_pairs() {
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT COUNT(*) FROM pairs", -1, &st.s, nullptr) != SQLITE_OK) return -1;
  return sqlite3_step(st.s) == SQLITE_ROW ? sqlite3_column_int64(st.s, 0) : -1;
}

Result<std::optional<PairDb::Pending>> PairDb::next_for(const std::string& reviewer) {
  Stmt st;
  const char* sql =
      "SELECT id, request, stable_text, shadow_text FROM pairs p WHERE stable_status = 200 AND shadow_status = 200"
      " AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.pair_id = p.id AND v.reviewer = ?) ORDER BY id LIMIT 1";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return db_error(db_, "prepare next");
  sqlite3_bind_text(st.s, 1, reviewer.data(), int(reviewer.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st.s);
  if (rc == SQLITE_DONE) return std::optional<Pending>();
  if (rc != SQLITE_ROW) return db_error(db_, "read a pair");
  Pending p;
  p.id = sqlite3_column_int64(st.s, 0);
  p.prompt = prompt_of(col_text(st.s, 1));
  p.stable_text = col_text(st.s, 2);
  p.shadow_text = col_text(st.s, 3);
  return std::optional<Pending>(std::move(p));
}

Status PairDb::add_verdict(int64_t pair_id, const std::string& reviewer, const std::string& winner) {
  if (winner != "stable" && winner != "shadow" && winner != "tie") return invalid_argument("winner: stable, shadow or tie");
  {
    Stmt st;
    if (sqlite3_prepare_v2(db_, "SELECT 1 FROM pairs WHERE id = ?", -1, &st.s, nullptr) != SQLITE_OK) return db_error(db_, "prepare");
    sqlite3_bind_int64(st.s, 1, pair_id);
    const int rc = sqlite3_step(st.s);
    if (rc == SQLITE_DONE) return not_found("no pair " + std::to_string(pair_id));
    if (rc != SQLITE_ROW) return db_error(db_, "find the pair");
  }
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO verdicts (pair_id, reviewer, winner, at_ms) VALUES (?,?,?,?)", -1, &st.s,
                         nullptr) != SQLITE_OK)
    return db_error(db_, "prepare verdict");
  sqlite3_bind_int64(st.s, 1, pair_id);
  sqlite3_bind_text(st.s, 2, reviewer.data(), int(reviewer.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 3, winner.data(), int(winner.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 4, now_ms());
  if (sqlite3_step(st.s) != SQLITE_DONE) return db_error(db_, "store the verdict");
  return Status::ok();
}

Result<json> PairDb::report() {
  Stmt st;
  const char* sql =
      "SELECT p.model, p.stable_version, p.shadow_version, v.winner, p.stable_latency_ms, p.shadow_latency_ms, p.stable_cost,"
      " p.shadow_cost, v.reviewer FROM verdicts v JOIN pairs p ON p.id = v.pair_id ORDER BY p.model, p.stable_version, p.shadow_version";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return db_error(db_, "prepare report");
  struct Acc {
    int64_t n = 0, stable = 0, shadow = 0, tie = 0;
    std::vector<double> lat_s, lat_c;
    double cost_s = 0, cost_c = 0;
    std::map<std::string, int64_t> reviewers;
  };
  std::map<std::tuple<std::string, std::string, std::string>, Acc> acc;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    Acc& a = acc[{col_text(st.s, 0), col_text(st.s, 1), col_text(st.s, 2)}];
    const std::string w = col_text(st.s, 3);
    ++a.n;
    a.stable += w == "stable";
    a.shadow += w == "shadow";
    a.tie += w == "tie";
    a.lat_s.push_back(sqlite3_column_double(st.s, 4));
    a.lat_c.push_back(sqlite3_column_double(st.s, 5));
    a.cost_s += sqlite3_column_double(st.s, 6);
    a.cost_c += sqlite3_column_double(st.s, 7);
    ++a.reviewers[col_text(st.s, 8)];
  }
  if (rc != SQLITE_DONE) return db_error(db_, "read the verdicts");
  json out = json::array();
  for (const auto& [k, a] : acc) {
    const auto& [model, sv, cv] = k;
    const double decided = double(a.stable + a.shadow);
    json rate = nullptr, lo = nullptr, hi = nullptr;
    if (decided > 0) {  // Wilson score interval, 95%
      const double p = double(a.shadow) / decided, z = 1.959963984540054, z2 = z * z;
      const double centre = (p + z2 / (2 * decided)) / (1 + z2 / decided);
      const double half = z * std::sqrt(p * (1 - p) / decided + z2 / (4 * decided * decided)) / (1 + z2 / decided);
      rate = p;
      lo = std::max(0.0, centre - half);
      hi = std::min(1.0, centre + half);
    }
    out.push_back({{"model", model},
                   {"stable_version", sv},
                   {"shadow_version", cv},
                   {"verdicts", a.n},
                   {"stable_wins", a.stable},
                   {"shadow_wins", a.shadow},
                   {"ties", a.tie},
                   {"shadow_win_rate", rate},
                   {"shadow_win_rate_ci95", {lo, hi}},
                   {"reviewers", a.reviewers},
                   {"latency_ms_median", {{"stable", median(a.lat_s)}, {"shadow", median(a.lat_c)}}},
                   {"cost_per_1000", {{"stable", a.cost_s / double(a.n) * 1000}, {"shadow", a.cost_c / double(a.n) * 1000}}}});
  }
  return json{{"pairs", count_pairs()}, {"comparisons", out}};
}

PairWriter::PairWriter(std::string path, int64_t max_rows, std::function<void(const std::string&, const std::string&)> on_error,
                       std::function<void(const PairRow&)> on_written)
    : path_(std::move(path)), max_rows_(max_rows), on_error_(std::move(on_error)), on_written_(std::move(on_written)),
      t_([this] { run(); }) {}

PairWriter::~PairWriter() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  t_.join();
}

bool PairWriter::push(PairRow r) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (q_.size() >= kMaxQueued) return false;
    q_.push_back(std::move(r));
  }
  cv_.notify_one();
  return true;
}

void PairWriter::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_.wait(lk, [&] { return q_.empty() && !busy_; });
}

void PairWriter::run() {
  std::unique_ptr<PairDb> db;
  int64_t retry_at = 0;
  for (;;) {
    PairRow r;
    {
      std::unique_lock<std::mutex> lk(mu_);
      busy_ = false;
      idle_.notify_all();
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stop_ with nothing left
      r = std::move(q_.front());
      q_.pop_front();
      busy_ = true;
    }
    if (!db && now_ms() >= retry_at) {
      auto d = PairDb::open(path_);
      if (d.is_ok()) db = std::move(d).value();
      else {
        on_error_("open", d.status().message());
        retry_at = now_ms() + 1000;  // a broken file: try again in a second, drop meanwhile
      }
    }
    if (!db) {
      on_error_("dropped", "the pair database is unavailable");
      continue;
    }
    if (Status st = db->insert(r, max_rows_); !st.is_ok()) {
      on_error_(st.code() == StatusCode::kUnavailable ? "locked" : "write", st.message());
      if (st.code() != StatusCode::kUnavailable) db.reset();  // reopen on the next pair
    } else if (on_written_) {
      on_written_(r);
    }
  }
}

}  // namespace ts::gateway
