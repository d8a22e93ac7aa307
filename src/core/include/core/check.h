// TS_CHECK: invariants of our own code. A failed check is a bug, never bad input: it
// prints the condition and location and aborts. Untrusted input must produce a Status.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace ts::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* msg);
}

#define TS_CHECK(cond)                                                         \
  do {                                                                         \
    if (__builtin_expect(!(cond), 0)) ::ts::detail::check_failed(__FILE__, __LINE__, #cond, ""); \
  } while (0)

#define TS_CHECK_MSG(cond, msg)                                                \
  do {                                                                         \
    if (__builtin_expect(!(cond), 0)) ::ts::detail::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
