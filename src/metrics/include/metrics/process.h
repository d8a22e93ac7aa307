// The standard process metrics of Prometheus clients (process_cpu_seconds_total,
// process_resident_memory_bytes, process_start_time_seconds, process_open_fds), read from
// /proc/self at scrape time and rendered as exposition text.
#pragma once

#include <cstdint>
#include <string>

namespace ts::metrics {

struct ProcessStats {
  double cpu_seconds = 0;          // user + system
  double resident_bytes = 0;
  double start_time_seconds = 0;   // Unix time
  int64_t open_fds = 0;
  bool ok = false;                 // /proc could be read
};

ProcessStats read_process_stats();
std::string process_metrics_text(const ProcessStats& s);

}  // namespace ts::metrics
