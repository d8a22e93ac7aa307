// Queue order within one tier: small policy classes chosen by a factory (vLLM v1 style).
// Items put at the head (promoted requests, preempted ones coming back) go before every
// other item, first come first served among themselves; the policy orders the rest.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "sched/config.h"
#include "sched/request.h"

namespace ts::sched {

struct QueueItem {
  RequestId id = 0;
  int64_t n_prompt_tokens = 0;
  bool at_head = false;
};

class QueuePolicy {
 public:
  virtual ~QueuePolicy() = default;
  virtual const char* name() const = 0;

  void push(const QueueItem& item);
  bool remove(RequestId id);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  // Service order: items()[0] is started first.
  const std::vector<QueueItem>& items() const { return items_; }

 protected:
  // Among items not at the head: does `a` go before `b`? Ties keep arrival order.
  virtual bool before(const QueueItem& a, const QueueItem& b) const = 0;

 private:
  std::vector<QueueItem> items_;
};

// First come, first served.
class FcfsQueue final : public QueuePolicy {
 public:
  const char* name() const override { return "fcfs"; }

 protected:
  bool before(const QueueItem&, const QueueItem&) const override { return false; }
};

// Shorter prompts first (lower time to first token on average; a long prompt can wait
// until its tier's max_queue_wait_ms acts on it).
class ShortestPromptFirstQueue final : public QueuePolicy {
 public:
  const char* name() const override { return "shortest_prompt_first"; }

 protected:
  bool before(const QueueItem& a, const QueueItem& b) const override { return a.n_prompt_tokens < b.n_prompt_tokens; }
};

std::unique_ptr<QueuePolicy> make_queue_policy(QueueKind kind);

}  // namespace ts::sched
