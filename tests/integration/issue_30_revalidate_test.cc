// Issue #30 item 4, end to end: perch-devfed serves three exports from a real
// XRootD origin, one saying `Cache-Control: no-cache`, one `max-age=3`, one
// nothing (perch-devfed --cache-control adds the header to every answer of
// the export's servers, PROPFIND included). Through the real perchd mount, a
// 12 MiB object (three 4 MiB blocks) is read whole, so that all of it is
// cached, then replaced at the origin by another of the same size:
//   - no-cache: the next read (past NamespaceCache::kMinFreshness, 1 s)
//     reads the new object whole, not the cached one, not a mix;
//   - max-age=3: a read within the 3 s reads one version whole (the cached
//     one may be served), a read after them the new one;
//   - no Cache-Control: reads stay cache hits with no question to the origin
//     (revalidations and version_checks do not move), as before.
// Each with the kernel's opens as they come here (passthrough where the
// kernel offers it) and with fuse_passthrough = false (FUSE no-open: the
// kernel opens files itself, perchd reads them by path). With perchd from
// before this change the first two fail: the old object is read from the
// cache (its attributes live file_ttl, an hour).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr size_t kSize = 12 << 20;  // three 4 MiB blocks

std::string Pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint64_t x = 0x9E3779B97F4A7C15ULL * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    s[i] = static_cast<char>(x);
  }
  return s;
}

// One open, read(2) to the end, close: the bytes, and errno if it failed.
struct Outcome {
  std::string bytes;
  int error = 0;
};
Outcome ReadWhole(const fs::path& path) {
  Outcome o;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return Outcome{"", errno};
  std::string buf(1 << 20, '\0');
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      o.error = errno;
      break;
    }
    if (n == 0) break;
    o.bytes.append(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return o;
}

// Names what `got` is: "old", "new", or how it is neither.
std::string Which(const Outcome& got, const std::string& old_bytes, const std::string& new_bytes) {
  if (got.error != 0) return std::string("error: ") + std::strerror(got.error);
  if (got.bytes == old_bytes) return "old";
  if (got.bytes == new_bytes) return "new";
  return "a mix or garbage (" + std::to_string(got.bytes.size()) + " bytes)";
}

// The parameter: whether perchd may use passthrough (else no-open).
class RevalidateTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    work_ = std::make_unique<TempDir>("revalidate");
    data_ = work_->path() / "data";
    for (const char* ns : {"nc", "ma", "plain"}) {
      WriteLocalFile(data_ / ns / "obj.bin", old_);
      SetModified(data_ / ns / "obj.bin", 1700000000);
    }
    MakeReadableByXrootd(data_);
    DevFed::Options opts;
    for (const char* ns : {"nc", "ma", "plain"}) {
      opts.exports.push_back({std::string("/") + ns, (data_ / ns).string(), false});
    }
    opts.caches = 0;  // the origin itself: a cache keeps versions of its own (docs/quirks.md)
    opts.extra_args = {"--cache-control", "/nc=no-cache", "--cache-control", "/ma=max-age=3"};
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
    const fs::path config = work_->path() / "perchd.toml";
    std::ofstream(config) << (GetParam() ? "" : "fuse_passthrough = false\n");
    ASSERT_EQ(perchd_.Start(
                  {"--config", config.string(), "--cache-dir", (work_->path() / "cache").string(),
                   "--control", "unix:" + Socket(), fed_->FederationUrl() + "/", mnt_.string()},
                  mnt_, work_->path() / "perchd.log"),
              "")
        << fed_->ErrLog();
  }

  static void SetModified(const fs::path& p, time_t t) {
    struct timespec times[2] = {{t, 0}, {t, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
  }
  // As a publisher would: a new file renamed over the old, same size, later mtime.
  void ReplaceAtTheOrigin(const std::string& ns) {
    const fs::path tmp = data_ / ns / ".obj.bin.new";
    WriteLocalFile(tmp, new_);
    SetModified(tmp, 1700000100);
    ::chmod(tmp.c_str(), 0644);
    fs::rename(tmp, data_ / ns / "obj.bin");
  }
  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }
  nlohmann::json Stats() { return PerchctlJson(Socket(), {"stats", "--json"}); }
  std::string Read(const std::string& ns) {
    return Which(ReadWhole(mnt_ / ns / "obj.bin"), old_, new_);
  }

  const std::string old_ = Pattern(kSize, 1);
  const std::string new_ = Pattern(kSize, 2);
  std::unique_ptr<TempDir> work_;
  std::unique_ptr<DevFed> fed_;
  fs::path data_, mnt_;
  PerchdProcess perchd_;  // stopped (and unmounted) before fed_ and work_ go
};

TEST_P(RevalidateTest, NoCacheReadsTheReplacedObjectWholeAtOnce) {
  ASSERT_EQ(Read("nc"), "old");
  ASSERT_EQ(Read("nc"), "old");  // all of it cached now
  const uint64_t hits = Stats().value("hits", 0);
  EXPECT_GT(hits, 0u);
  ReplaceAtTheOrigin("nc");
  std::this_thread::sleep_for(milliseconds(1100));  // NamespaceCache::kMinFreshness
  EXPECT_EQ(Read("nc"), "new");
  EXPECT_EQ(Read("nc"), "new");
  struct stat st {};
  ASSERT_EQ(::stat((mnt_ / "nc" / "obj.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtime, 1700000100);
  nlohmann::json stats = Stats();
  EXPECT_GE(stats.value("revalidations", 0), 1) << stats.dump();
  EXPECT_GE(stats.value("revalidated_changes", 0), 1) << stats.dump();
}

TEST_P(RevalidateTest, MaxAgeServesTheCachedObjectWithinItsLifetimeOnly) {
  // The origin was asked after `start` and before `cached`; whole seconds:
  // its answer lives more than 2 s and at most 3 s from then.
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(Read("ma"), "old");
  const auto cached = std::chrono::steady_clock::now();
  ReplaceAtTheOrigin("ma");
  // Within the 3 s: one version whole (the cached one while surely fresh).
  const std::string within = Read("ma");
  if (std::chrono::steady_clock::now() - start < milliseconds(1500)) {
    EXPECT_EQ(within, "old");
  } else {
    EXPECT_TRUE(within == "old" || within == "new") << within;
  }
  std::this_thread::sleep_until(cached + milliseconds(3100));
  EXPECT_EQ(Read("ma"), "new");
  nlohmann::json stats = Stats();
  EXPECT_GE(stats.value("revalidated_changes", 0), 1) << stats.dump();
}

TEST_P(RevalidateTest, WithoutCacheControlHitsAskNothing) {
  ASSERT_EQ(Read("plain"), "old");
  nlohmann::json before = Stats();
  for (int i = 0; i < 3; ++i) {
    std::ofstream("/proc/sys/vm/drop_caches") << "1\n";  // reads reach perchd
    EXPECT_EQ(Read("plain"), "old");
  }
  ReplaceAtTheOrigin("plain");
  std::this_thread::sleep_for(milliseconds(1500));
  std::ofstream("/proc/sys/vm/drop_caches") << "1\n";
  EXPECT_EQ(Read("plain"), "old");  // file_ttl (an hour): the cached version, as before
  nlohmann::json after = Stats();
  // Served from the cache: by perchd (hits) or by the kernel from the
  // cache's file (passthrough opens, whole_files).
  auto cached = [](const nlohmann::json& s) {
    return s.value("hits", 0) + s.value("whole_files", 0);
  };
  EXPECT_GE(cached(after), cached(before) + 4) << after.dump();
  EXPECT_EQ(after.value("revalidations", 0), 0) << after.dump();
  EXPECT_EQ(after.value("version_checks", 0), before.value("version_checks", 0)) << after.dump();
  EXPECT_EQ(after.value("misses", 0), before.value("misses", 0)) << after.dump();
}

INSTANTIATE_TEST_SUITE_P(Opens, RevalidateTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "AsTheKernelOffers" : "NoOpen";
                         });

}  // namespace
}  // namespace perch::testing
