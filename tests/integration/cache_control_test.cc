// Issue #30 item 4, end to end: perch-devfed serves two exports from real
// XRootD origins through a real XCache; one says `Cache-Control: no-store`
// (perch-devfed --cache-control). Through the real perchd mount, its files
// read byte-exact, every read of them is a fetch, and no byte of them is ever
// written under the cache directory; the other export is cached as always.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

// True if a file under `dir` holds the first 64 bytes of `needle` (the cache
// keeps blocks in files of its own format: a block is found by its bytes).
bool AnyFileHolds(const fs::path& dir, const std::string& needle) {
  const std::string probe = needle.substr(0, 64);
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.find(probe) != std::string::npos) return true;
  }
  return false;
}

class CacheControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    work_ = std::make_unique<TempDir>("cache-control");
    // One pseudo-random stream: no two files share bytes.
    CreateTestTree(work_->path(), {{"nostore/small.bin", 70000},
                                   {"nostore/big.bin", 9 << 20},
                                   {"pub/small.bin", 70000},
                                   {"pub/big.bin", 9 << 20}});
    MakeReadableByXrootd(work_->path());
    DevFed::Options opts;
    opts.exports.push_back({"/nostore", (work_->path() / "nostore").string(), false});
    opts.exports.push_back({"/pub", (work_->path() / "pub").string(), false});
    opts.caches = 1;
    opts.extra_args = {"--cache-control", "/nostore=no-store"};
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = work_->path() / "mnt";
    cache_ = work_->path() / "cache";
    fs::create_directories(mnt_);
    ASSERT_EQ(perchd_.Start({"--cache-dir", cache_.string(), "--control", "unix:" + Socket(),
                             fed_->FederationUrl() + "/", mnt_.string()},
                            mnt_, work_->path() / "perchd.log"),
              "")
        << fed_->ErrLog();
  }

  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }
  std::string Original(const std::string& rel) { return ReadLocalFile(work_->path() / rel); }

  std::unique_ptr<TempDir> work_;
  std::unique_ptr<DevFed> fed_;
  fs::path mnt_, cache_;
  PerchdProcess perchd_;  // stopped (and unmounted) before fed_ and work_ go
};

TEST_F(CacheControlTest, ANoStoreExportIsReadThroughAndNeverWritten) {
  for (const char* f : {"small.bin", "big.bin"}) {
    EXPECT_EQ(ReadLocalFile(mnt_ / "nostore" / f), Original(std::string("nostore/") + f)) << f;
    EXPECT_EQ(ReadLocalFile(mnt_ / "pub" / f), Original(std::string("pub/") + f)) << f;
  }
  nlohmann::json before = PerchctlJson(Socket(), {"stats", "--json"});
  // small (1 block) + big (3 blocks of 4 MiB) of /nostore, at least once each.
  EXPECT_GE(before["uncacheable_blocks"], 4u) << before.dump();
  // Read again, past the kernel's page cache (it may keep what a reader was
  // served, in memory): /pub comes from perch's cache, /nostore is fetched.
  std::ofstream("/proc/sys/vm/drop_caches") << "1\n";
  EXPECT_EQ(ReadLocalFile(mnt_ / "nostore" / "small.bin"), Original("nostore/small.bin"));
  EXPECT_EQ(ReadLocalFile(mnt_ / "pub" / "small.bin"), Original("pub/small.bin"));
  nlohmann::json after = PerchctlJson(Socket(), {"stats", "--json"});
  EXPECT_GT(after["uncacheable_blocks"], before["uncacheable_blocks"]) << after.dump();
  ASSERT_EQ(perchd_.Stop(), 0);  // every write is flushed: the cache is what it will be
  EXPECT_FALSE(AnyFileHolds(cache_, Original("nostore/small.bin"))) << "a no-store block was kept";
  EXPECT_FALSE(AnyFileHolds(cache_, Original("nostore/big.bin").substr(5 << 20)));
  EXPECT_TRUE(AnyFileHolds(cache_, Original("pub/small.bin"))) << "the other export is cached";
}

}  // namespace
}  // namespace perch::testing
