#include "daemon/control/process_stats.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/control/stats_proto.h"

namespace perch::control {

namespace {

double Seconds(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
}

// The number after "Threads:" in /proc/self/status; 0 if there is none.
uint64_t Threads() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::strtoull(line.c_str() + 8, nullptr, 10);
  }
  return 0;
}

// Resident pages (the second number of /proc/self/statm) in bytes; 0 if unreadable.
uint64_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0;
  uint64_t resident = 0;
  if (!(in >> size >> resident)) return 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  return resident * static_cast<uint64_t>(page > 0 ? page : 4096);
}

// Entries of /proc/self/fd, less the one the listing itself holds open; 0 if unreadable.
uint64_t OpenFds() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/fd", ec);
  if (ec) return 0;
  uint64_t n = 0;
  for (const auto& entry : it) {
    (void)entry;
    ++n;
  }
  return n > 0 ? n - 1 : 0;
}

}  // namespace

v1::ProcessStats SampleProcess() {
  v1::ProcessStats out;
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    out.set_cpu_seconds(Seconds(ru.ru_utime) + Seconds(ru.ru_stime));
    out.set_cpu_system_seconds(Seconds(ru.ru_stime));
  }
  out.set_resident_bytes(ResidentBytes());
  out.set_open_fds(OpenFds());
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    out.set_max_fds(nofile.rlim_cur);
  }
  out.set_threads(Threads());
  return out;
}

core::Status StatsNow(const core::StatsSnapshot& s, v1::Stats* out) {
  core::Status st = ToProto(s, out);
  *out->mutable_process() = SampleProcess();
  return st;
}

}  // namespace perch::control
