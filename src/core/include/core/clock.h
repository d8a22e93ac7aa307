// Time behind an interface so schedulers and tests can inject a manual clock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ts {

// Monotonic nanoseconds since an arbitrary epoch.
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t now_ns() const = 0;
};

class SteadyClock final : public Clock {
 public:
  int64_t now_ns() const override { return ts::now_ns(); }
};

// A clock that moves only when told to.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ns = 0) : t_(start_ns) {}
  int64_t now_ns() const override { return t_.load(); }
  void advance_ns(int64_t d) { t_ += d; }
  void set_ns(int64_t t) { t_ = t; }

 private:
  std::atomic<int64_t> t_;
};

}  // namespace ts
