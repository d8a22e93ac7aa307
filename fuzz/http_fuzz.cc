// libFuzzer target: the connection-level HTTP framing (server/http_framing.h) on arbitrary
// byte streams of several requests. The first input byte picks how the stream is cut into
// reads. Checked: no crash, hang or leak; every request returned is well formed; an error
// is terminal; and framing does not depend on how the bytes arrive: the same stream fed in
// one piece, in the fuzzer's pieces and a byte at a time gives the same requests and the
// same error. Two differences are allowed, both about when Beast looks at a head: a bad
// request line may be refused as soon as it is seen, or only once its head is complete
// (so one run may end in that error while another still waits for the rest of the head);
// and a request that is both malformed and over a size limit (head or body: Beast counts
// bytes it is still waiting on against the limit) may be refused for either fault.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_framing.h"

namespace {

using ts::server::FramingError;
using ts::server::HttpRequest;
using ts::server::RequestFramer;

void check(bool ok) {
  if (!ok) std::abort();
}

struct Run {
  std::vector<HttpRequest> requests;
  bool error = false;
  FramingError err;
  bool pending = false;  // no error, and bytes of an unfinished request are buffered
};

// Feeds `stream` cut at the given piece sizes (cycled), draining requests after each.
Run feed(std::string_view stream, const std::vector<size_t>& pieces) {
  ts::server::FramingLimits lim;
  lim.max_header_bytes = 1024;
  lim.max_body_bytes = 2048;
  RequestFramer f(lim);
  Run run;
  size_t off = 0, k = 0;
  while (off < stream.size() && !run.error) {
    const size_t n = std::min(stream.size() - off, pieces[k++ % pieces.size()]);
    f.feed(stream.substr(off, n));
    off += n;
    for (;;) {
      HttpRequest r;
      const auto next = f.next(&r, &run.err);
      if (next == RequestFramer::Next::kRequest) {
        check(!r.method.empty());
        check(!r.path.empty() && (r.path.front() == '/' || r.path == "*"));
        check(r.body.size() <= size_t(lim.max_body_bytes));
        for (const auto& [name, value] : r.headers) {
          check(!name.empty());
          for (char c : name) check(!(c >= 'A' && c <= 'Z'));  // lowercased
        }
        run.requests.push_back(std::move(r));
        continue;
      }
      if (next == RequestFramer::Next::kError) {
        run.error = true;
        check(run.err.status >= 400 && run.err.status <= 505);
        check(!run.err.code.empty() && !run.err.message.empty());
        // Terminal: more bytes change nothing.
        FramingError again;
        f.feed("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
        check(f.next(&r, &again) == RequestFramer::Next::kError && again.code == run.err.code);
      }
      break;
    }
  }
  run.pending = !run.error && f.in_request();
  return run;
}

bool too_large(const FramingError& e) { return e.status == 431 || e.status == 413; }

bool same(const Run& a, const Run& b) {
  if (a.requests.size() != b.requests.size()) return false;
  if (a.error && b.error && (a.err.status != b.err.status || a.err.code != b.err.code) &&
      !too_large(a.err) && !too_large(b.err))
    return false;
  if (a.error != b.error && !(a.error ? b.pending : a.pending)) return false;
  for (size_t i = 0; i < a.requests.size(); ++i) {
    const auto &x = a.requests[i], &y = b.requests[i];
    if (x.method != y.method || x.path != y.path || x.query != y.query || x.body != y.body || x.headers != y.headers)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t cut = data[0];
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  const Run whole = feed(stream, {stream.size() + 1});
  const Run pieces = feed(stream, {size_t(cut % 17) + 1, size_t(cut / 17) + 1});
  check(same(whole, pieces));
  if (stream.size() <= 4096) check(same(whole, feed(stream, {1})));
  return 0;
}
