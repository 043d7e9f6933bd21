// Stalled servers (SIGSTOPped: the kernel still accepts their connections,
// nothing answers) through the real perchd and mount: a stalled cache is left
// after the first-byte time, not the 20 s low-speed limit, and one read(2)
// of an uncached file whose only server stalls ends within one op_timeout,
// however many FUSE requests the kernel cut it into.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class StalledServersTest : public ::testing::Test {
 protected:
  void Start(int caches) {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("stalled");
    tree_ = work_->path() / "tree";
    files_ = {{"a.bin", 100000}, {"b.bin", 100000}, {"c.bin", 100000}, {"big.bin", 8 << 20}};
    CreateTestTree(tree_, files_);
    DevFed::Options opts;
    opts.exports.push_back({"/s", tree_.string(), false});
    opts.caches = caches;
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
  }

  void Mount(const std::string& op_timeout) {
    std::vector<std::string> args = {
        "--cache-dir",   (work_->path() / "cache").string(), "--op-timeout", op_timeout,
        "--no-prefetch", fed_->FederationUrl() + "/s",       mnt_.string()};
    ASSERT_EQ(perchd_.Start(args, mnt_, work_->path() / "perchd.log"), "");
  }

  void TearDown() override {
    // Wake whatever a test stopped, so that everything can be torn down.
    if (fed_) {
      fed_->Signal("/s", -1, SIGCONT);
      for (int i = 0; i < 2; ++i) fed_->Signal("/s", i, SIGCONT);
    }
  }

  std::unique_ptr<TempDir> work_;
  fs::path tree_, mnt_;
  std::vector<TreeFile> files_;
  std::unique_ptr<DevFed> fed_;
  PerchdProcess perchd_;
};

TEST_F(StalledServersTest, AStalledCacheIsLeftAfterTheFirstByteTime) {
  Start(2);
  Mount("30s");
  fed_->Signal("/s", 0, SIGSTOP);  // the director still names it first
  auto start = Clock::now();
  for (const char* f : {"a.bin", "b.bin", "c.bin"}) {
    ASSERT_EQ(ReadLocalFile(mnt_ / f), ReadLocalFile(tree_ / f)) << f << "\n" << perchd_.Log();
  }
  // One first-byte wait (at most 10 s, about 1 s on loopback), then the
  // stalled cache sorts last: far from 3 x 20 s.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(12)) << perchd_.Log();
}

TEST_F(StalledServersTest, OneReadOfAnUncachedFileEndsWithinOneOpTimeout) {
  Start(0);
  Mount("3s");
  ASSERT_EQ(fs::file_size(mnt_ / "big.bin"), 8u << 20);  // metadata known, no bytes cached
  fed_->Signal("/s", -1, SIGSTOP);
  int fd = ::open((mnt_ / "big.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string buf(8 << 20, '\0');
  auto start = Clock::now();
  ssize_t n = ::read(fd, buf.data(), buf.size());
  int err = errno;
  auto took = Clock::now() - start;
  ::close(fd);
  EXPECT_EQ(n, -1);
  EXPECT_EQ(err, EIO);
  // op_timeout is 3 s; the kernel cuts an 8 MiB read into several requests,
  // and none after the first waits again.
  EXPECT_LT(took, std::chrono::milliseconds(5500))
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms";
}

}  // namespace
}  // namespace perch::testing
