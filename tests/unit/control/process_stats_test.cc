// perchd's own footprint in Stats (process_stats.h): the figures are this
// process's as the kernel counts them, they follow what the process does
// (descriptors opened, threads started, CPU spent), and they reach
// Prometheus under its standard process_* names and perchctl's "perchd" line.
#include "daemon/control/process_stats.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/control/prometheus.h"
#include "perchctl/format.h"

namespace perch::control {
namespace {

// This thread's CPU time so far.
std::chrono::nanoseconds ThreadCpu() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// Spends `d` of CPU in this thread (user and system: getppid is a system call), however
// busy the machine is.
void Burn(std::chrono::milliseconds d) {
  const auto end = ThreadCpu() + d;
  volatile uint64_t sink = 0;
  while (ThreadCpu() < end) {
    for (int i = 0; i < 1000; ++i) sink = sink + static_cast<uint64_t>(::getppid());
  }
}

TEST(ProcessStats, CpuIsThisProcesssAndGrowsWithWork) {
  const v1::ProcessStats before = SampleProcess();
  Burn(std::chrono::milliseconds(200));
  const v1::ProcessStats after = SampleProcess();
  EXPECT_GT(after.cpu_seconds(), before.cpu_seconds() + 0.1);
  EXPECT_LE(after.cpu_system_seconds(), after.cpu_seconds());
  EXPECT_GE(after.cpu_system_seconds(), before.cpu_system_seconds());
  rusage ru{};
  ASSERT_EQ(::getrusage(RUSAGE_SELF, &ru), 0);
  EXPECT_LE(after.cpu_seconds(), static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 2);
}

TEST(ProcessStats, DescriptorsAndThreadsFollowTheProcess) {
  const v1::ProcessStats before = SampleProcess();
  std::array<int, 2> pipes[4];
  for (auto& p : pipes) ASSERT_EQ(::pipe(p.data()), 0);
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&] {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return stop; });
    });
  }
  const v1::ProcessStats during = SampleProcess();
  {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  for (auto& p : pipes) {
    ::close(p[0]);
    ::close(p[1]);
  }
  EXPECT_EQ(during.open_fds(), before.open_fds() + 8);
  EXPECT_EQ(during.threads(), before.threads() + 3);
  EXPECT_GE(before.open_fds(), 3u);  // stdin, stdout, stderr at least
  EXPECT_GE(before.threads(), 1u);
  rlimit nofile{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);
  EXPECT_EQ(before.max_fds(), nofile.rlim_cur);
}

TEST(ProcessStats, ResidentMemoryGrowsWithTouchedPages) {
  const v1::ProcessStats before = SampleProcess();
  EXPECT_GT(before.resident_bytes(), 1u << 20);
  std::vector<char> block(64 << 20, 1);  // touched: resident
  const v1::ProcessStats after = SampleProcess();
  EXPECT_GE(after.resident_bytes(), before.resident_bytes() + (48 << 20));
  EXPECT_EQ(block[block.size() - 1], 1);
}

TEST(ProcessStats, PrometheusHasTheStandardNamesAndPerchctlTheFigures) {
  v1::Stats stats;
  ASSERT_TRUE(StatsNow(core::StatsSnapshot{}, &stats).ok());
  EXPECT_GT(stats.process().resident_bytes(), 0u);
  const std::string text = RenderPrometheus(stats);
  for (const std::string line : {
           "\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ",
           "\n# TYPE perch_process_cpu_system_seconds_total counter\n",
           "\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes ",
           "\n# TYPE process_open_fds gauge\nprocess_open_fds ",
           "\n# TYPE process_max_fds gauge\nprocess_max_fds ",
           "\n# TYPE perch_process_threads gauge\nperch_process_threads ",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  ::testing::internal::CaptureStdout();
  ctl::PrintStats(stats);
  const std::string human = ::testing::internal::GetCapturedStdout();
  for (const char* part : {"perchd    uptime 0 s, cpu ", ", cpu system ", ", resident ",
                           ", open fds ", ", max fds ", ", threads "}) {
    EXPECT_NE(human.find(part), std::string::npos) << part << "\n" << human;
  }
}

}  // namespace
}  // namespace perch::control
