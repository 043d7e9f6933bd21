// Issue 28 on trees no one here wrote or sized: the C and C++ headers Debian
// installs on this machine (/usr/include, ~34,000 files, 350 MB: libtorch's,
// Boost's, glibc's), compared with `diff -r` through the mount cold and
// after perchd restarts on its cache; and directories of 20,000 and 100,000
// entries (ImageNet's validation set is one directory of 50,000), listed
// completely, with perchd's memory growth while listing the larger one.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

// A field of /proc/PID/status in KiB ("VmRSS", "VmHWM"); 0 if unreadable.
uint64_t StatusKiB(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

// Names in `dir` by readdir(3).
std::vector<std::string> Names(const fs::path& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

class RealTreeTest : public MountedFederation {};

TEST_F(RealTreeTest, DebiansHeadersReadTheSameColdAndAfterARestart) {
  StartFederation("corpus", {}, [](const fs::path& tree) {
    // Copied as installed (links kept), less links that point nowhere.
    const std::string include = (tree / "include").string();
    for (std::vector<std::string> step :
         {std::vector<std::string>{"/bin/cp", "-a", "/usr/include", include},
          {"/usr/bin/find", include, "-xtype", "l", "-delete"},
          {"/bin/chmod", "-R", "a+rX", include}}) {
      RunResult r = RunToExit(step[0], {step.begin() + 1, step.end()}, std::chrono::seconds(300));
      ASSERT_EQ(r.exit_code, 0) << step[0] << ": " << r.output;
    }
  });
  if (IsSkipped()) return;
  Mount();
  RunResult cold =
      RunToExit("/usr/bin/diff", {"-r", (tree_ / "include").string(), (mnt_ / "include").string()},
                std::chrono::seconds(600));
  EXPECT_EQ(cold.exit_code, 0) << "cold:\n" << cold.output.substr(0, 4000);
  ASSERT_EQ(perchd_.Stop(), 0);
  Mount();
  RunResult warm =
      RunToExit("/usr/bin/diff", {"-r", (tree_ / "include").string(), (mnt_ / "include").string()},
                std::chrono::seconds(600));
  EXPECT_EQ(warm.exit_code, 0) << "after a restart:\n" << warm.output.substr(0, 4000);
}

TEST_F(RealTreeTest, DirectoriesOfTwentyAndAHundredThousandEntriesListWhole) {
  const std::vector<size_t> sizes = {20000, 100000};
  StartFederation("bigdirs", {}, [&](const fs::path& tree) {
    for (size_t n : sizes) {
      fs::path d = tree / ("d" + std::to_string(n));
      fs::create_directories(d);
      for (size_t i = 0; i < n; ++i) {
        char name[64];
        std::snprintf(name, sizeof(name), "ILSVRC2012_val_%08zu.JPEG", i + 1);
        int fd = ::open((d / name).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        ASSERT_GE(fd, 0);
        ::close(fd);
      }
    }
    MakeReadableByXrootd(tree);
  });
  if (IsSkipped()) return;
  Mount();
  for (size_t n : sizes) {
    const fs::path d = "d" + std::to_string(n);
    const uint64_t before = StatusKiB(perchd_.pid(), "VmRSS");
    std::vector<std::string> got = Names(mnt_ / d);
    const uint64_t peak = StatusKiB(perchd_.pid(), "VmHWM");
    const uint64_t after = StatusKiB(perchd_.pid(), "VmRSS");
    EXPECT_EQ(got, Names(tree_ / d)) << n << " entries";
    std::string figure = std::to_string(n) + " entries: perchd VmRSS " + std::to_string(before) +
                         " -> " + std::to_string(after) + " KiB, peak " + std::to_string(peak) +
                         " KiB";
    RecordProperty("rss_" + std::to_string(n), figure);
    std::cout << figure << std::endl;
    if (n == 100000) {
      // The issue's goal: a 100,000-entry listing costs perchd under 64 MiB.
      EXPECT_LT(after - std::min(after, before), 64u * 1024) << figure;
    }
    // A second listing is answered from memory: the same names.
    EXPECT_EQ(Names(mnt_ / d).size(), n);
  }
}

}  // namespace
}  // namespace perch::testing
