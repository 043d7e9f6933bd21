// Issue #30 item 6, through the real perchd and mount: the last resort is the
// origin. A director that names only a hung cache (it accepts connections
// and never answers) while the origin answers `?directread`: every read
// succeeds, each read(2) within op_timeout (before, each failed with EIO
// after a whole op_timeout). Where the director refuses direct reads (405),
// reads fail with EIO within op_timeout and the director is asked once.
//
// Two federations: FaultServer (a fake one whose director is told how to
// answer ?directread) and perch-devfed with one real XCache, SIGSTOPped, in
// front of a real XRootD origin.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/devfed/devfed_harness.h"
#include "tests/fakes/fault_server.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string RandomBytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

// A file read through the mount with 1 MiB read(2) calls, each timed.
struct TimedRead {
  std::string bytes;
  int error = 0;            // errno of the read(2) that failed (or of open), 0 if none
  milliseconds slowest{0};  // the longest single read(2)
};

TimedRead ReadTimed(const fs::path& path) {
  TimedRead out;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    out.error = errno;
    return out;
  }
  std::string buf(1 << 20, '\0');
  while (true) {
    auto start = Clock::now();
    ssize_t n = ::read(fd, buf.data(), buf.size());
    int err = errno;
    out.slowest =
        std::max(out.slowest, std::chrono::duration_cast<milliseconds>(Clock::now() - start));
    if (n < 0) {
      out.error = err;
      break;
    }
    if (n == 0) break;
    out.bytes.append(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

nlohmann::json Stats(const std::string& control) {
  RunResult r = RunToExit(PERCHCTL_PATH, {"--socket", control, "stats", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  try {
    return nlohmann::json::parse(r.output);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.output;
    return nlohmann::json::object();
  }
}

// ---- a fake federation: FaultServer ----

class FaultOriginFallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("origin-fallback");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
    std::vector<FaultServer::ListingEntry> listing;
    for (int i = 0; i < 4; ++i) {
      std::string name = "f" + std::to_string(i) + ".bin";
      objects_.emplace_back(name, RandomBytes((1 << 20) + 1000 * i, i));
      server_.AddObject(name, objects_.back().second);
      listing.push_back({name, std::to_string(objects_.back().second.size()), false});
    }
    server_.SetListing("", listing);
    server_.SetLinks({"silent"});  // the director names only a hung cache
  }

  void Mount(const std::string& op_timeout) {
    ASSERT_EQ(perchd_.Start({"--cache-dir", (work_->path() / "cache").string(), "--op-timeout",
                             op_timeout, "--no-prefetch", "--control", "unix:" + Socket(),
                             server_.BaseUrl() + "/ns", mnt_.string()},
                            mnt_, work_->path() / "perchd.log"),
              "");
  }
  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  FaultServer server_;
  std::unique_ptr<TempDir> work_;
  fs::path mnt_;
  std::vector<std::pair<std::string, std::string>> objects_;
  PerchdProcess perchd_;  // declared last: stopped (and unmounted) first
};

TEST_F(FaultOriginFallbackTest, EveryReadSucceedsFromTheOriginWithinOpTimeout) {
  server_.SetDirectReads("ok");  // the origin, for a namespace with DirectReads
  Mount("10s");
  for (const auto& [name, bytes] : objects_) {
    TimedRead r = ReadTimed(mnt_ / name);
    EXPECT_EQ(r.error, 0) << name << ": " << std::strerror(r.error) << "\n" << perchd_.Log();
    EXPECT_TRUE(r.bytes == bytes) << name << ": " << r.bytes.size() << " bytes";
    EXPECT_LT(r.slowest, milliseconds(10000)) << name << ": " << r.slowest.count() << " ms";
    // One first-byte wait on the hung cache (1 s on loopback), then the origin.
    EXPECT_LT(r.slowest, milliseconds(5000)) << name << ": " << r.slowest.count() << " ms";
  }
  EXPECT_GE(server_.Hits("silent"), 1);  // the hung cache was tried: the test means something
  EXPECT_GE(server_.Hits("ok"), static_cast<int>(objects_.size()));
  EXPECT_EQ(server_.DirectReadHits(), 1) << "the answer is kept for the namespace";
  nlohmann::json s = Stats(Socket());
  EXPECT_GE(s.value("origin_fallbacks", uint64_t{0}), objects_.size()) << s.dump();
  std::string log = perchd_.Log();
  EXPECT_NE(log.find("(?directread)"), std::string::npos) << log;
}

TEST_F(FaultOriginFallbackTest, ARefusedDirectReadFailsWithinOpTimeoutAndIsAskedOnce) {
  // SetDirectReads not called: the director answers ?directread with 405.
  Mount("4s");
  for (int i = 0; i < 2; ++i) {
    TimedRead r = ReadTimed(mnt_ / objects_[i].first);
    EXPECT_EQ(r.error, EIO) << objects_[i].first << "\n" << perchd_.Log();
    // op_timeout, and the reply's way back through FUSE: not a second op_timeout.
    EXPECT_LT(r.slowest, milliseconds(5500)) << r.slowest.count() << " ms";
  }
  EXPECT_EQ(server_.DirectReadHits(), 1) << perchd_.Log();
  EXPECT_EQ(server_.Hits("ok"), 0);
  std::string log = perchd_.Log();
  EXPECT_NE(log.find("refuses direct reads"), std::string::npos) << log;
}

// ---- a real federation: perch-devfed, one XCache SIGSTOPped ----

class DevfedOriginFallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("origin-fallback-devfed");
    tree_ = work_->path() / "tree";
    files_ = {{"a.bin", 300000}, {"b.bin", 2 << 20}, {"d/c.bin", 100000}, {"d/e.bin", 5 << 20}};
    CreateTestTree(tree_, files_);
    DevFed::Options opts;
    opts.exports.push_back({"/s", tree_.string(), false});
    opts.caches = 1;
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
  }

  void TearDown() override {
    // Wake what the test stopped, whatever happened, so that all can be torn down.
    if (fed_) fed_->Signal("/s", 0, SIGCONT);
  }

  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  std::unique_ptr<TempDir> work_;
  fs::path tree_, mnt_;
  std::vector<TreeFile> files_;
  std::unique_ptr<DevFed> fed_;
  PerchdProcess perchd_;  // declared last: stopped (and unmounted) first
};

TEST_F(DevfedOriginFallbackTest, AStoppedOnlyCacheLeavesReadsToTheOriginWithinOpTimeout) {
  ASSERT_EQ(perchd_.Start({"--cache-dir", (work_->path() / "cache").string(), "--op-timeout", "10s",
                           "--no-prefetch", "--control", "unix:" + Socket(),
                           fed_->FederationUrl() + "/s", mnt_.string()},
                          mnt_, work_->path() / "perchd.log"),
            "");
  // The cache serves the first file; then it hangs, and the director, which
  // does not notice a stopped process, goes on naming it alone.
  ASSERT_EQ(ReadLocalFile(mnt_ / files_[0].rel), ReadLocalFile(tree_ / files_[0].rel));
  for (const TreeFile& f : files_) ASSERT_EQ(fs::file_size(mnt_ / f.rel), f.size);
  fed_->Signal("/s", 0, SIGSTOP);
  for (size_t i = 1; i < files_.size(); ++i) {
    TimedRead r = ReadTimed(mnt_ / files_[i].rel);
    EXPECT_EQ(r.error, 0) << files_[i].rel << ": " << std::strerror(r.error) << "\n"
                          << perchd_.Log();
    EXPECT_TRUE(r.bytes == ReadLocalFile(tree_ / files_[i].rel)) << files_[i].rel;
    EXPECT_LT(r.slowest, milliseconds(10000)) << files_[i].rel << ": " << r.slowest.count();
  }
  nlohmann::json s = Stats(Socket());
  EXPECT_GE(s.value("origin_fallbacks", uint64_t{0}), 1u) << s.dump();
}

}  // namespace
}  // namespace perch::testing
