#include "sched/queue_policy.h"

#include <algorithm>

namespace ts::sched {

void QueuePolicy::push(const QueueItem& item) {
  // After every item that goes first: heads before non-heads, then the policy's order,
  // equal items in arrival order.
  auto pos = std::find_if(items_.begin(), items_.end(), [&](const QueueItem& x) {
    if (item.at_head != x.at_head) return item.at_head;
    return !item.at_head && before(item, x);
  });
  items_.insert(pos, item);
}

bool QueuePolicy::remove(RequestId id) {
  auto it = std::find_if(items_.begin(), items_.end(), [&](const QueueItem& x) { return x.id == id; });
  if (it == items_.end()) return false;
  items_.erase(it);
  return true;
}

std::unique_ptr<QueuePolicy> make_queue_policy(QueueKind kind) {
  switch (kind) {
    case QueueKind::kFcfs: return std::make_unique<FcfsQueue>();
    case QueueKind::kShortestPromptFirst: return std::make_unique<ShortestPromptFirstQueue>();
  }
  return std::make_unique<FcfsQueue>();
}

}  // namespace ts::sched
