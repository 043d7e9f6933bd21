// perchd end to end: a real perch-devfed federation (XRootD origin and
// cache), the real perchd binary, a real FUSE mount, read by ordinary file
// I/O. Every test has its own cache dir and mountpoint and unmounts in its
// destructors, also on failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

// Reads a file through the mount with plain POSIX I/O.
std::string ReadThrough(const fs::path& p) { return ReadLocalFile(p); }

class MountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!DevFed::XrootdAvailable() || !FuseAvailable()) return;
    tree_ = new TempDir("mount-tree");
    CreateTestTree(tree_->path(), StandardTreeFiles());
    DevFed::Options opts;
    opts.exports.push_back({"/test", tree_->path().string(), false});
    opts.caches = 1;
    fed_ = new DevFed(opts);
    start_error_ = new std::string(fed_->Start());
  }
  static void TearDownTestSuite() {
    delete fed_;
    fed_ = nullptr;
    delete tree_;
    tree_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }

  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    ASSERT_TRUE(start_error_->empty()) << *start_error_;
    work_ = std::make_unique<TempDir>("mount");
    mnt_ = work_->path() / "mnt";
    cache_ = work_->path() / "cache";
    fs::create_directories(mnt_);
  }

  std::vector<std::string> Args(std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"--cache-dir", cache_.string(), "--op-timeout",
                                  "5s",          "--log-level",   "info"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back(fed_->FederationUrl() + "/test");
    a.push_back(mnt_.string());
    return a;
  }

  void Mount(PerchdProcess& p, std::vector<std::string> extra = {}) {
    std::string err = p.Start(Args(std::move(extra)), mnt_,
                              work_->path() / ("perchd-" + std::to_string(++runs_) + ".log"));
    ASSERT_TRUE(err.empty()) << err;
  }

  static TempDir* tree_;
  static DevFed* fed_;
  static std::string* start_error_;
  std::unique_ptr<TempDir> work_;
  fs::path mnt_, cache_;
  int runs_ = 0;
};
TempDir* MountTest::tree_ = nullptr;
DevFed* MountTest::fed_ = nullptr;
std::string* MountTest::start_error_ = nullptr;

TEST_F(MountTest, TreeListsAndReadsByteExact) {
  PerchdProcess perchd;
  Mount(perchd);
  // ls -R and stat: same names, types and sizes as the export.
  std::map<std::string, std::pair<bool, uint64_t>> want, got;
  for (auto& e : fs::recursive_directory_iterator(tree_->path())) {
    want[fs::relative(e.path(), tree_->path()).string()] = {e.is_directory(),
                                                            e.is_directory() ? 0 : e.file_size()};
  }
  for (auto& e : fs::recursive_directory_iterator(mnt_)) {
    got[fs::relative(e.path(), mnt_).string()] = {e.is_directory(),
                                                  e.is_directory() ? 0 : e.file_size()};
  }
  EXPECT_EQ(got, want);
  // Every file byte-exact, twice (the second time from the cache).
  for (int round = 0; round < 2; ++round) {
    for (const auto& f : StandardTreeFiles()) {
      std::string a = ReadThrough(mnt_ / fs::path(f.rel));
      std::string b = ReadLocalFile(tree_->path() / fs::path(f.rel));
      ASSERT_EQ(a.size(), b.size()) << f.rel;
      ASSERT_TRUE(a == b) << f.rel << " differs (round " << round << ")";
    }
  }
  // Random (offset, length) reads with pread.
  std::string want_big = ReadLocalFile(tree_->path() / "large.bin");
  int fd = open((mnt_ / "large.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 200; ++i) {
    uint64_t off = rng() % want_big.size();
    uint64_t len = 1 + rng() % std::min<uint64_t>(want_big.size() - off, 3 << 20);
    std::string buf(len, '\0');
    ssize_t n = pread(fd, buf.data(), len, static_cast<off_t>(off));
    ASSERT_EQ(n, static_cast<ssize_t>(len)) << "pread at " << off;
    ASSERT_TRUE(buf == want_big.substr(off, len)) << "range " << off << "+" << len;
  }
  close(fd);
  EXPECT_FALSE(fs::exists(mnt_ / "no-such-file"));
}

// The mount's kernel read-ahead (its bdi's read_ahead_kb) is fuse_read_ahead
// (1 MiB by default, from 128 KiB), so a large file is read in 1 MiB requests.
TEST_F(MountTest, KernelReadAheadIsSetOnTheMount) {
  auto read_ahead_kb = [&] {
    struct stat st {};
    if (stat(mnt_.c_str(), &st) != 0) return std::string("stat failed");
    std::string kb;
    for (int i = 0; i < 100; ++i) {  // set by perchd once the mount serves
      std::ifstream in("/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                       std::to_string(minor(st.st_dev)) + "/read_ahead_kb");
      std::getline(in, kb);
      if (kb != "128") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return kb;
  };
  // The window is the configured size cut to a multiple of perchd's largest read (which is
  // less than 1 MiB where a pipe may not grow past fs.pipe-max-size: "max_read N KiB").
  auto expected_kb = [](const std::string& log, uint64_t configured_kb) {
    const size_t at = log.find("max_read ");
    if (at == std::string::npos) return std::string("no max_read in the log");
    const uint64_t io_kb = std::stoull(log.substr(at + 9));
    return std::to_string(configured_kb > io_kb ? configured_kb / io_kb * io_kb : configured_kb);
  };
  {
    PerchdProcess perchd;
    Mount(perchd);
    EXPECT_EQ(read_ahead_kb(), expected_kb(perchd.Log(), 1024));
  }
  const fs::path config = work_->path() / "perchd.toml";
  std::ofstream(config) << "fuse_read_ahead = \"4M\"\n";
  PerchdProcess perchd;
  Mount(perchd, {"--config", config.string()});
  EXPECT_EQ(read_ahead_kb(), expected_kb(perchd.Log(), 4096));
  EXPECT_EQ(ReadThrough(mnt_ / "large.bin"), ReadLocalFile(tree_->path() / "large.bin"));
}

TEST_F(MountTest, WritesAreRefusedWithEROFS) {
  PerchdProcess perchd;
  Mount(perchd);
  errno = 0;
  EXPECT_EQ(open((mnt_ / "new-file").c_str(), O_CREAT | O_WRONLY, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_EQ(open((mnt_ / "small.txt").c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_EQ(unlink((mnt_ / "small.txt").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  errno = 0;
  EXPECT_EQ(mkdir((mnt_ / "d").c_str(), 0755), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(std::system(("touch '" + (mnt_ / "small.txt").string() + "' 2>/dev/null").c_str()) == 0,
            false);
  EXPECT_TRUE(fs::exists(tree_->path() / "small.txt"));
}

TEST_F(MountTest, QuotaSmallerThanTheTreeEvictsAndStaysCorrect) {
  PerchdProcess perchd;
  Mount(perchd, {"--cache-size", "8M", "--block-size", "1M"});
  for (int round = 0; round < 2; ++round) {
    for (const auto& f : StandardTreeFiles()) {
      ASSERT_TRUE(ReadThrough(mnt_ / fs::path(f.rel)) ==
                  ReadLocalFile(tree_->path() / fs::path(f.rel)))
          << f.rel;
    }
  }
  // Eviction runs in the background: the cache settles under its quota
  // (block files, and object and pack files, whose evicted blocks are holes).
  uint64_t on_disk = 0;
  for (int i = 0; i < 100; ++i) {
    on_disk = 0;
    for (const char* dir : {"blocks", "objects", "packs"}) {
      if (!fs::exists(cache_ / dir)) continue;
      for (auto& e : fs::recursive_directory_iterator(cache_ / dir)) {
        struct stat st {};
        if (e.is_regular_file() && ::stat(e.path().c_str(), &st) == 0)
          on_disk += static_cast<uint64_t>(st.st_blocks) * 512;
      }
    }
    if (on_disk < (8u << 20)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(on_disk, 8u << 20) << "cache exceeds its quota";
  EXPECT_NE(perchd.Log().find("evicted"), std::string::npos);
}

TEST_F(MountTest, CorruptCacheFileIsDetectedAndRefetched) {
  std::string want = ReadLocalFile(tree_->path() / "block.bin");
  {
    PerchdProcess perchd;
    Mount(perchd);
    ASSERT_TRUE(ReadThrough(mnt_ / "block.bin") == want);
  }
  // Flip one byte in the middle of every block file and object file (a
  // 4 MiB file is one full block: an object file, beside its map).
  size_t corrupted = 0;
  for (auto& e : fs::recursive_directory_iterator(cache_)) {
    const std::string top = fs::relative(e.path(), cache_).begin()->string();
    if (top != "blocks" && top != "objects") continue;
    if (!e.is_regular_file() || e.file_size() < 1000 || e.path().extension() == ".map") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(e.file_size() / 2));
    char c;
    f.get(c);
    f.seekp(static_cast<std::streamoff>(e.file_size() / 2));
    f.put(static_cast<char>(c ^ 0x5a));
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0u);
  // Every block is checked on its first read after a start, however the
  // last run ended (here: cleanly).
  PerchdProcess again;
  Mount(again);
  EXPECT_TRUE(ReadThrough(mnt_ / "block.bin") == want);
  EXPECT_NE(again.Log().find("failed its check"), std::string::npos) << again.Log();
}

TEST_F(MountTest, SecondDaemonOnTheSameCacheDirRefuses) {
  PerchdProcess perchd;
  Mount(perchd);
  fs::path other = work_->path() / "mnt2";
  fs::create_directories(other);
  auto r = RunPerchdToExit({"--foreground", "--cache-dir", cache_.string(),
                            fed_->FederationUrl() + "/test", other.string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("another perchd"), std::string::npos) << r.output;
  EXPECT_FALSE(IsMounted(other));
}

TEST_F(MountTest, BadInputGivesOneClearMessage) {
  struct Case {
    std::vector<std::string> args;
    const char* needle;
  };
  std::string url = fed_->FederationUrl() + "/test";
  std::string c = cache_.string();
  fs::path bad_cfg = work_->path() / "bad.toml";
  std::ofstream(bad_cfg) << "cache_size = \"lots\"\n";
  for (const Case& k : std::vector<Case>{
           {{"--foreground", "--cache-dir", c, "ftp://x/y", mnt_.string()}, "unsupported scheme"},
           {{"--foreground", "--cache-dir", c, url, (work_->path() / "missing").string()},
            "does not exist"},
           {{"--foreground", "--cache-dir", c, "--cache-size", "lots", url, mnt_.string()},
            "not a size"},
           {{"--foreground", "--cache-dir", c, "--config", bad_cfg.string(), url, mnt_.string()},
            "cache_size"},
           {{"--foreground", "--cache-dir", c, "http://127.0.0.1:1/test", mnt_.string()},
            "cannot mount"},
       }) {
    auto r = RunPerchdToExit(k.args);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(k.needle), std::string::npos) << "expected '" << k.needle << "' in:\n"
                                                          << r.output;
    EXPECT_FALSE(IsMounted(mnt_));
  }
}

// Issue #11: a perchd killed with SIGKILL leaves a dead mount (ENOTCONN);
// the next one detaches it, mounts again and serves every byte.
TEST_F(MountTest, RestartAfterSigkillMountsOverTheDeadMount) {
  PerchdProcess perchd;
  Mount(perchd);
  ASSERT_EQ(ReadThrough(mnt_ / "small.txt"), ReadLocalFile(tree_->path() / "small.txt"));
  perchd.Kill();
  struct statfs st {};
  ASSERT_NE(::statfs(mnt_.c_str(), &st), 0);
  ASSERT_EQ(errno, ENOTCONN) << "a SIGKILLed perchd should leave a dead mount";
  ASSERT_TRUE(IsMounted(mnt_));

  Mount(perchd);
  EXPECT_NE(perchd.Log().find("was a dead FUSE mount"), std::string::npos) << perchd.Log();
  for (const auto& f : StandardTreeFiles()) {
    EXPECT_TRUE(ReadThrough(mnt_ / fs::path(f.rel)) ==
                ReadLocalFile(tree_->path() / fs::path(f.rel)))
        << f.rel;
  }
  EXPECT_EQ(perchd.Stop(), 0) << perchd.Log();
  EXPECT_FALSE(IsMounted(mnt_));
}

// A live perch mount belongs to another perchd: never mounted over.
TEST_F(MountTest, SecondDaemonOnALiveMountRefuses) {
  PerchdProcess perchd;
  Mount(perchd);
  auto r = RunPerchdToExit({"--foreground", "--cache-dir", (work_->path() / "cache2").string(),
                            fed_->FederationUrl() + "/test", mnt_.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("is already a perch mount"), std::string::npos) << r.output;
  EXPECT_EQ(ReadThrough(mnt_ / "small.txt"), ReadLocalFile(tree_->path() / "small.txt"));
  EXPECT_EQ(perchd.Stop(), 0) << perchd.Log();
}

// The mount would hide a directory's entries: refused unless asked for.
TEST_F(MountTest, NonEmptyMountpointRefusedUnlessAllowed) {
  std::ofstream(mnt_ / "keep.txt") << "mine";
  auto r = RunPerchdToExit(Args({"--foreground"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is not empty (it holds 'keep.txt')"), std::string::npos) << r.output;
  EXPECT_FALSE(IsMounted(mnt_));

  PerchdProcess perchd;
  Mount(perchd, {"--allow-nonempty-mountpoint"});
  EXPECT_FALSE(fs::exists(mnt_ / "keep.txt"));
  EXPECT_EQ(ReadThrough(mnt_ / "small.txt"), ReadLocalFile(tree_->path() / "small.txt"));
  EXPECT_EQ(perchd.Stop(), 0) << perchd.Log();
  EXPECT_EQ(ReadLocalFile(mnt_ / "keep.txt"), "mine");
}

TEST(MountRestartTest, CachedFilesSurviveAFederationOutage) {
  if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
  if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
  TempDir tree("restart-tree");
  auto files = StandardTreeFiles(/*include_large=*/false);
  CreateTestTree(tree.path(), files);
  TempDir work("restart");
  fs::path mnt = work.path() / "mnt", cache = work.path() / "cache";
  fs::create_directories(mnt);
  auto fed =
      std::make_unique<DevFed>(DevFed::Options{{{"/r", tree.path().string(), false}}, 0, false});
  ASSERT_EQ(fed->Start(), "");
  // Without prefetch, so that the file this test leaves unread stays uncached.
  std::vector<std::string> args = {"--cache-dir", cache.string(),  "--op-timeout",
                                   "3s",          "--no-prefetch", fed->FederationUrl() + "/r",
                                   mnt.string()};
  // Read everything but the uncached file; list the whole tree.
  {
    PerchdProcess perchd;
    ASSERT_EQ(perchd.Start(args, mnt, work.path() / "1.log"), "");
    for (auto& e : fs::recursive_directory_iterator(mnt)) (void)e;
    for (const auto& f : files) {
      if (f.rel == "with space.bin") continue;
      ASSERT_TRUE(ReadLocalFile(mnt / fs::path(f.rel)) ==
                  ReadLocalFile(tree.path() / fs::path(f.rel)));
    }
    EXPECT_EQ(perchd.Stop(), 0) << perchd.Log();
  }
  fed->Stop();  // director, origin: all gone (their ports held, devfed_harness.h)
  PerchdProcess perchd;
  ASSERT_EQ(perchd.Start(args, mnt, work.path() / "2.log"), "");
  for (const auto& f : files) {
    if (f.rel == "with space.bin") continue;
    EXPECT_TRUE(ReadLocalFile(mnt / fs::path(f.rel)) ==
                ReadLocalFile(tree.path() / fs::path(f.rel)))
        << f.rel;
  }
  // The uncached file: EIO within the deadline, never a hang.
  auto start = std::chrono::steady_clock::now();
  int fd = open((mnt / "with space.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  char buf[16];
  errno = 0;
  EXPECT_EQ(read(fd, buf, sizeof(buf)), -1);
  EXPECT_EQ(errno, EIO);
  close(fd);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace perch::testing
