// An LD_PRELOAD library for the tests: the wall clock of the process it is loaded into
// moved by TIERSERVE_TEST_CLOCK_SKEW_S seconds (CLOCK_REALTIME and what reads it:
// clock_gettime, gettimeofday, time), the monotonic clocks untouched, as a machine whose
// clock is set wrong would be. (libfaketime moves the deadlines of absolute monotonic
// timerfds too, which stops Boost.Asio's timers; this shim moves nothing else.)
#include <dlfcn.h>
#include <sys/time.h>
#include <time.h>

#include <cstdlib>

namespace {

long long skew_s() {
  static const long long s = [] {
    const char* e = std::getenv("TIERSERVE_TEST_CLOCK_SKEW_S");
    return e ? std::atoll(e) : 0LL;
  }();
  return s;
}

using ClockGettime = int (*)(clockid_t, struct timespec*);

ClockGettime real_clock_gettime() {
  static const ClockGettime f = reinterpret_cast<ClockGettime>(dlsym(RTLD_NEXT, "clock_gettime"));
  return f;
}

}  // namespace

extern "C" {

int clock_gettime(clockid_t id, struct timespec* ts) {
  const int r = real_clock_gettime()(id, ts);
  if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += skew_s();
  return r;
}

int gettimeofday(struct timeval* tv, void*) {
  struct timespec ts;
  const int r = clock_gettime(CLOCK_REALTIME, &ts);
  if (r == 0 && tv) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return r;
}

time_t time(time_t* out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}

}  // extern "C"
