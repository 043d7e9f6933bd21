// Hardening issue #11, items 1 and 9, end to end: the real perchd mounts a
// FaultServer federation whose PROPFIND listing is hostile (a file of
// 18446744073709551615 bytes, one of exactly the 1 PiB limit, names with a
// newline, one over 255 bytes) next to an honest 5-byte file. Reading the small
// file (which starts directory prefetch) and `perchctl warm` of the directory
// must keep perchd small and responsive, and SIGTERM must end it promptly.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "tests/fakes/fault_server.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

// VmRSS of `pid` in KiB (0 if unreadable).
uint64_t RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  }
  return 0;
}

class HostileListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("hostile");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
    server_.SetLinks({"ok"});
    server_.SetListing("", {{"d", "4096", true}});
    server_.SetListing("d", {{"huge", "18446744073709551615", false},
                             {"pib", std::to_string(1ULL << 50), false},
                             {"small", "5", false},
                             {"bad\nname", "5", false},
                             {std::string(300, 'x'), "5", false}});
    server_.AddObject("d/small", "hello");
  }

  void Mount() {
    ASSERT_EQ(
        perchd_.Start({"--cache-dir", (work_->path() / "cache").string(), "--op-timeout", "20s",
                       "--control", "unix:" + Socket(), server_.BaseUrl() + "/ns", mnt_.string()},
                      mnt_, work_->path() / "perchd.log"),
        "");
  }
  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  FaultServer server_;
  std::unique_ptr<TempDir> work_;
  fs::path mnt_;
  PerchdProcess perchd_;  // declared last: stopped (and unmounted) first
};

TEST_F(HostileListingTest, HugeSizesAndBadNamesStayBoundedAndSigtermIsPrompt) {
  Mount();
  const uint64_t rss_start = RssKiB(perchd_.pid());
  ASSERT_GT(rss_start, 0u);
  // The honest sibling reads; its open starts directory prefetch of d.
  EXPECT_EQ(ReadLocalFile(mnt_ / "d" / "small"), "hello");
  // The listing shows what the mount can serve: the 2^64-1 file and the
  // names over 255 bytes are skipped; a newline is a byte like any other.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(mnt_ / "d"))
    names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"bad\nname", "pib", "small"}));
  EXPECT_EQ(fs::file_size(mnt_ / "d" / "pib"), 1ULL << 50);
  // Warm the directory: the 1 PiB file is queued block by block, fails at
  // its first block (the server has no such object) and the job ends.
  RunResult warm =
      RunToExit(PERCHCTL_PATH, {"--socket", Socket(), "warm", (mnt_ / "d").string(), "--wait"},
                std::chrono::seconds(60));
  EXPECT_NE(warm.exit_code, -1) << "perchctl warm did not finish: " << warm.output;
  EXPECT_NE(warm.output.find("pib"), std::string::npos) << warm.output;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // prefetch runs behind the reader
  const uint64_t rss_end = RssKiB(perchd_.pid());
  EXPECT_LT(rss_end, rss_start + 100 * 1024)
      << "VmRSS grew from " << rss_start << " to " << rss_end << " KiB";
  EXPECT_EQ(ReadLocalFile(mnt_ / "d" / "small"), "hello");
  // One warning per listing, the name escaped: no forged log line.
  std::string log = perchd_.Log();
  EXPECT_NE(log.find("skipped 1 entry with a size"), std::string::npos) << log;
  EXPECT_NE(log.find(std::string(300, 'x')), std::string::npos) << log;  // the skipped name
  EXPECT_EQ(log.find("bad\nname"), std::string::npos) << log;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(perchd_.Stop(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Issue #11 item 7 through the mount: the director's first answer names an
// origin for listings that is gone (a closed port), its next answer the one
// that serves. perchd mounts and lists at once (it asks the director again
// after the listing fails), instead of failing until the answer expires.
TEST_F(HostileListingTest, ListingsFollowAnOriginThatMoved) {
  server_.SetDirectorOverride(
      307,
      {{"Link", "<" + server_.BaseUrl() + "/srv/ok/ns/>; rel=\"duplicate\"; pri=1; depth=0"},
       {"X-Pelican-Namespace",
        "namespace=/ns, require-token=false, collections-url=http://127.0.0.1:1"}},
      /*times=*/1);
  Mount();
  EXPECT_TRUE(fs::is_directory(mnt_ / "d")) << perchd_.Log();
  EXPECT_EQ(ReadLocalFile(mnt_ / "d" / "small"), "hello");
  EXPECT_EQ(server_.DirectorHits() >= 2, true);
}

}  // namespace
}  // namespace perch::testing
