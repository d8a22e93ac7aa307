// The pair database: pairs in and bounded, the next pair a reviewer has not judged, verdicts
// (a pair that does not exist, a winner that is not one), the report's counts and its
// Wilson interval; a file that is not a database, a database locked by another writer, and
// a writer whose file cannot be opened: explicit errors, nothing blocks.
#include "gateway/pair_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>

namespace ts::gateway {
namespace {

std::string fresh(const std::string& name) {
  const std::string p = std::string(TS_BINARY_DIR) + "/" + name;
  for (const char* ext : {"", "-wal", "-shm"}) std::remove((p + ext).c_str());
  return p;
}

PairRow row(int i, int shadow_status = 200) {
  PairRow r;
  r.at_ms = 1000 + i;
  r.model = "chat";
  r.endpoint = "completions";
  r.request = R"({"prompt":"p)" + std::to_string(i) + R"("})";
  r.stable = {"v1", 200, "stable " + std::to_string(i), "", 10, 100, 0.001, 4};
  r.shadow = {"v2", shadow_status, "shadow " + std::to_string(i), shadow_status == 200 ? "" : "queue_timeout", 20, 200, 0.002, 4};
  return r;
}

TEST(PairDb, PairsVerdictsAndTheReport) {
  auto db = PairDb::open(fresh("pairs_test.db"));
  ASSERT_TRUE(db.is_ok()) << db.status().to_string();
  PairDb& d = **db;
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(d.insert(row(i, i == 3 ? 0 : 200), 10).is_ok());
  EXPECT_EQ(d.count_pairs(), 10);  // the two oldest went
  auto p = d.next_for("ann");
  ASSERT_TRUE(p.is_ok() && p->has_value());
  EXPECT_EQ((*p)->prompt, "p2");
  EXPECT_EQ((*p)->stable_text, "stable 2");
  EXPECT_EQ((*p)->shadow_text, "shadow 2");
  // Every whole pair once: 9 (pair 3's shadow failed), the winners 6 shadow, 2 stable, 1 tie.
  int n = 0;
  for (;;) {
    auto q = d.next_for("ann");
    ASSERT_TRUE(q.is_ok());
    if (!q->has_value()) break;
    const std::string w = n < 6 ? "shadow" : n < 8 ? "stable" : "tie";
    ASSERT_TRUE(d.add_verdict((*q)->id, "ann", w).is_ok());
    ++n;
  }
  EXPECT_EQ(n, 9);
  EXPECT_TRUE(d.next_for("bob")->has_value());  // another reviewer sees them all again
  EXPECT_EQ(d.add_verdict(9999, "ann", "tie").code(), StatusCode::kNotFound);
  EXPECT_EQ(d.add_verdict(5, "ann", "both").code(), StatusCode::kInvalidArgument);
  auto rep = d.report();
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  ASSERT_EQ((*rep)["comparisons"].size(), 1u) << rep->dump();
  const auto& c = (*rep)["comparisons"][0];
  EXPECT_EQ(c["verdicts"], 9);
  EXPECT_EQ(c["shadow_wins"], 6);
  EXPECT_EQ(c["stable_wins"], 2);
  EXPECT_EQ(c["ties"], 1);
  EXPECT_DOUBLE_EQ(c["shadow_win_rate"].get<double>(), 0.75);
  // Wilson 95% for 6 of 8: 0.409 .. 0.929.
  EXPECT_NEAR(c["shadow_win_rate_ci95"][0].get<double>(), 0.409, 0.002);
  EXPECT_NEAR(c["shadow_win_rate_ci95"][1].get<double>(), 0.929, 0.002);
  EXPECT_DOUBLE_EQ(c["latency_ms_median"]["shadow"].get<double>(), 200);
  EXPECT_NEAR(c["cost_per_1000"]["shadow"].get<double>(), 2.0, 1e-9);
  EXPECT_EQ(c["reviewers"]["ann"], 9);
}

TEST(PairDb, BrokenAndLockedFilesAreExplicitErrors) {
  const std::string junk = fresh("pairs_junk.db");
  std::ofstream(junk) << "this is not a database, just text that is long enough to be read as a header............";
  auto bad = PairDb::open(junk);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("pairs_junk.db"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(PairDb::open("/nonexistent/dir/pairs.db").is_ok());
  // Another connection holds the write lock: an insert is kUnavailable after the busy timeout.
  const std::string path = fresh("pairs_locked.db");
  auto db = PairDb::open(path);
  ASSERT_TRUE(db.is_ok());
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  const Status st = (*db)->insert(row(1), 100);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  EXPECT_TRUE((*db)->insert(row(1), 100).is_ok());
}

TEST(PairWriter, ErrorsAreReportedAndNothingBlocks) {
  std::atomic<int> errors{0};
  {
    PairWriter w("/nonexistent/dir/pairs.db", 100, [&](const std::string&, const std::string&) { ++errors; });
    const auto t0 = std::chrono::steady_clock::now();
    int accepted = 0;
    for (int i = 0; i < 3000; ++i) accepted += w.push(row(i));
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << "push blocked";
    EXPECT_LE(accepted, 3000);
    w.flush();
  }
  EXPECT_GT(errors.load(), 0);
  // A good file: every pair pushed is there after a flush.
  const std::string path = fresh("pairs_writer.db");
  {
    PairWriter w(path, 1000, [&](const std::string&, const std::string& m) { ADD_FAILURE() << m; });
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(w.push(row(i)));
    w.flush();
  }
  auto db = PairDb::open(path);
  ASSERT_TRUE(db.is_ok());
  EXPECT_EQ((*db)->count_pairs(), 50);
}

}  // namespace
}  // namespace ts::gateway
