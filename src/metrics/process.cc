#include "metrics/process.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace ts::metrics {

ProcessStats read_process_stats() {
  ProcessStats s;
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return s;
  // Fields after the command name (which may hold spaces and parentheses): field 3 on.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return s;
  std::istringstream rest(line.substr(close + 2));
  std::string f[20];
  for (int i = 0; i < 20 && rest >> f[i]; ++i) {
  }
  // state(3) ppid(4) ... utime(14) stime(15) ... starttime(22): indices from field 3.
  const double tick = double(sysconf(_SC_CLK_TCK));
  const double utime = std::atof(f[11].c_str()), stime = std::atof(f[12].c_str()), start = std::atof(f[19].c_str());
  s.cpu_seconds = (utime + stime) / tick;
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  if (statm >> size >> resident) s.resident_bytes = double(resident) * double(sysconf(_SC_PAGESIZE));
  std::ifstream pstat("/proc/stat");
  double btime = 0;
  for (std::string l; std::getline(pstat, l);)
    if (l.rfind("btime ", 0) == 0) btime = std::atof(l.c_str() + 6);
  s.start_time_seconds = btime + start / tick;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++s.open_fds;
    closedir(d);
    --s.open_fds;  // the directory's own descriptor
  }
  s.ok = true;
  return s;
}

std::string process_metrics_text(const ProcessStats& s) {
  if (!s.ok) return "";
  char b[1024];
  std::snprintf(b, sizeof b,
                "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
                "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.2f\n"
                "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %.0f\n"
                "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
                "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n"
                "# HELP process_open_fds Number of open file descriptors.\n"
                "# TYPE process_open_fds gauge\nprocess_open_fds %lld\n",
                s.cpu_seconds, s.resident_bytes, s.start_time_seconds, (long long)s.open_fds);
  return b;
}

}  // namespace ts::metrics
