// FUSE passthrough end to end: the real perchd over a real federation, a
// complete cached object of more than one block read by the kernel straight
// from the cache's object file (no READ request reaches perchd: its cache
// hit counters stay still), small and incomplete files served as before,
// and a file the kernel reads that way kept from eviction while it is open.
// Skipped where the kernel offers no passthrough (before Linux 6.9).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/integration/mounted_federation.h"
#include "tests/integration/stats_json.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

class PassthroughTest : public MountedFederation {
 protected:
  void SetUp() override {
    std::vector<TreeFile> files = {
        {"big.bin", 20 * kMiB + 12345}, {"block.bin", 4 * kMiB}, {"small.bin", 100000}};
    for (int i = 0; i < 300; ++i) files.push_back({"many/f" + std::to_string(i), 700});
    StartFederation("passthrough", files);
    if (HasFatalFailure() || IsSkipped()) return;
    Mount({"--log-level", "info"});
    if (perchd_.Log().find("passthrough for complete cached objects") == std::string::npos) {
      GTEST_SKIP() << "the kernel offers no FUSE passthrough here";
    }
  }

  json Stats() { return CtlJson({"stats", "--json"}); }
  uint64_t Num(const json& s, const char* name) {
    return s.contains(name) ? s[name].get<uint64_t>() : 0;
  }

  // Reads `rel` through the mount until an open of it passes through (the
  // release of an earlier open reaches perchd after close returns: until
  // then the file is still open in the kernel's cached mode).
  bool ReadUntilDirect(const std::string& rel, std::string* bytes) {
    for (int i = 0; i < 50; ++i) {
      const uint64_t before = Num(Stats(), "whole_files");
      *bytes = ReadFile(rel);
      if (Num(Stats(), "whole_files") > before) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
};

TEST_F(PassthroughTest, ACompleteCachedLargeFileIsReadByTheKernelFromTheCache) {
  const std::string want = Original("big.bin");
  // Cold: fetched through perchd, which writes the object file.
  ASSERT_TRUE(ReadFile("big.bin") == want);
  EXPECT_EQ(Num(Stats(), "whole_files"), 0u);
  std::string got;
  ASSERT_TRUE(ReadUntilDirect("big.bin", &got)) << perchd_.Log();
  EXPECT_TRUE(got == want);
  // Once it passes through, reads never reach perchd: its hit counters stay.
  const json before = Stats();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ReadFile("big.bin") == want);
  const json after = Stats();
  EXPECT_GT(Num(after, "whole_files"), Num(before, "whole_files"));
  EXPECT_EQ(Num(after, "bytes_from_cache"), Num(before, "bytes_from_cache"));
  EXPECT_EQ(Num(after, "hits"), Num(before, "hits"));
  // Random reads and a mapping of it see the same bytes; nothing reads past its end.
  const int fd = ::open((mnt_ / "big.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string buf(300000, '\0');
  for (uint64_t off : {uint64_t{0}, 4 * kMiB - 100, 9 * kMiB + 7, want.size() - 5000}) {
    ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(off));
    ASSERT_EQ(n, static_cast<ssize_t>(std::min<uint64_t>(buf.size(), want.size() - off))) << off;
    EXPECT_TRUE(buf.substr(0, static_cast<size_t>(n)) == want.substr(off, static_cast<size_t>(n)))
        << off;
  }
  EXPECT_EQ(::pread(fd, buf.data(), buf.size(), static_cast<off_t>(want.size())), 0);
  void* map = ::mmap(nullptr, want.size(), PROT_READ, MAP_PRIVATE, fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  EXPECT_EQ(std::memcmp(map, want.data(), want.size()), 0);
  ::munmap(map, want.size());
  // While the kernel may read the file, its blocks stay: an evict leaves them.
  json e = CtlJson({"evict", "/test/big.bin", "--json"});
  EXPECT_EQ(e.value("objects", 0u), 0u) << e.dump();
  ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(12 * kMiB));
  ASSERT_EQ(n, static_cast<ssize_t>(buf.size()));
  EXPECT_TRUE(buf == want.substr(12 * kMiB, buf.size()));
  ::close(fd);
  // Closed (and released): evicted, and the next read fetches again.
  for (int i = 0; i < 50 && e.value("objects", 0u) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    e = CtlJson({"evict", "/test/big.bin", "--json"});
  }
  EXPECT_EQ(e.value("objects", 0u), 1u) << e.dump();
  const uint64_t net = Num(Stats(), "bytes_from_network");
  EXPECT_TRUE(ReadFile("big.bin") == want);
  EXPECT_EQ(Num(Stats(), "bytes_from_network"), net + want.size());
}

TEST_F(PassthroughTest, AFileShorterThanABlockIsServedAsBeforeAndAFullBlockPasses) {
  // Shorter than a block: a block file (header and bytes), read through perchd.
  const std::string small = Original("small.bin");
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(ReadFile("small.bin") == small) << "round " << round;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Num(Stats(), "whole_files"), 0u);
  EXPECT_GT(Num(Stats(), "bytes_from_cache"), 0u);
  // Exactly one block: an object file, which passes through once cached.
  const std::string block = Original("block.bin");
  ASSERT_TRUE(ReadFile("block.bin") == block);
  std::string got;
  EXPECT_TRUE(ReadUntilDirect("block.bin", &got));
  EXPECT_TRUE(got == block);
}

TEST_F(PassthroughTest, AnOpenWhileTheFileIsOpenCachedStaysCached) {
  const std::string want = Original("big.bin");
  // Open before anything is cached (cached mode), then read it whole from a
  // second open: the kernel wants both in one mode, so neither passes through.
  const int first = ::open((mnt_ / "big.bin").c_str(), O_RDONLY);
  ASSERT_GE(first, 0);
  ASSERT_TRUE(ReadFile("big.bin") == want);
  ASSERT_TRUE(ReadFile("big.bin") == want);
  EXPECT_EQ(Num(Stats(), "whole_files"), 0u);
  std::string buf(1000, '\0');
  ASSERT_EQ(::pread(first, buf.data(), buf.size(), 5 * kMiB), 1000);
  EXPECT_TRUE(buf == want.substr(5 * kMiB, 1000));
  ::close(first);
  std::string got;
  EXPECT_TRUE(ReadUntilDirect("big.bin", &got));
  EXPECT_TRUE(got == want);
}

TEST_F(PassthroughTest, ASmallFileWorkloadTurnsToNoOpenAfterTheFirst256Opens) {
  // 256 opens of files shorter than a block, none of them large: from then
  // on the kernel opens files itself (no OPEN, no RELEASE per file).
  for (int i = 0; i < 300; ++i) {
    const std::string rel = "many/f" + std::to_string(i);
    ASSERT_EQ(ReadFile(rel), Original(rel)) << rel;
  }
  auto opens = [&] {
    json op = Element(Stats()["fuse_ops"], "op", "open");
    return op.is_null() ? uint64_t{0} : op["latency"]["count"].get<uint64_t>();
  };
  const uint64_t after_first = opens();
  EXPECT_GE(after_first, 256u);
  EXPECT_LT(after_first, 300u);
  for (int i = 0; i < 300; i += 7) {
    const std::string rel = "many/f" + std::to_string(i);
    ASSERT_EQ(ReadFile(rel), Original(rel)) << rel;
  }
  EXPECT_EQ(opens(), after_first);
  EXPECT_NE(perchd_.Log().find("a small-file workload; no-open from now on"), std::string::npos)
      << perchd_.Log();
  // Large files are still served, through perchd now.
  EXPECT_TRUE(ReadFile("big.bin") == Original("big.bin"));
  EXPECT_TRUE(ReadFile("big.bin") == Original("big.bin"));
  EXPECT_EQ(Num(Stats(), "whole_files"), 0u);
}

}  // namespace
}  // namespace perch::testing
