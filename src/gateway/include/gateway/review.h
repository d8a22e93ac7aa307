// `tierserve review --db FILE`: the blind A/B review of shadow pairs (docs/gateway.md:
// review). A page with no network resources shows a recorded prompt and its two answers in
// a random order, unlabelled; the reviewer picks A, B or a tie; the verdict is stored with
// the reviewer's name against the versions the answers came from (the order is kept here,
// never sent). /report (HTML) and /report.json give each version pair's win rate with a
// 95% interval next to their latency and cost over the same pairs.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "gateway/pair_store.h"
#include "server/http_types.h"
#include "server/router.h"

namespace ts::gateway {

class ReviewApp {
 public:
  explicit ReviewApp(std::unique_ptr<PairDb> db);
  void dispatch(const server::HttpRequest& req, std::shared_ptr<server::Responder> out) { routes_.dispatch(req, std::move(out)); }
  static constexpr size_t kMaxOpen = 10000;  // pairs shown and not yet judged, remembered

 private:
  void page(std::shared_ptr<server::Responder> out) const;
  void next(const server::HttpRequest& req, std::shared_ptr<server::Responder> out);
  void verdict(const server::HttpRequest& req, std::shared_ptr<server::Responder> out);
  void report(std::shared_ptr<server::Responder> out, bool html);

  struct Shown {
    int64_t pair_id = 0;
    bool a_is_shadow = false;
    std::string reviewer;
  };
  server::Router routes_;
  std::mutex mu_;
  std::unique_ptr<PairDb> db_;           // GUARDED_BY(mu_)
  std::map<std::string, Shown> shown_;   // GUARDED_BY(mu_): token -> what was shown
  std::mt19937_64 rng_;                  // GUARDED_BY(mu_)
};

}  // namespace ts::gateway
