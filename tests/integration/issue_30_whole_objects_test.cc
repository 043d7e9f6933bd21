// Issue #30 item 1 for objects larger than a block, end to end: perch-devfed
// with two real XCache servers in front of a real XRootD origin, a proxy that
// flips one byte in a fifth of the caches' response bodies (never the
// origin's), and the real perchd mount with --verify-digests and 64 KiB
// blocks, so that each 640 KiB file is ten Range GETs and most first copies
// hold a wrong block. A reader that reads such a file to its end gets either
// every byte right or an error (EIO or ESTALE), never the whole file wrong;
// the copy is dropped and fetched again from the origin, so reading it again
// gives the origin's bytes.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/corrupt_caches.h"
#include "tests/integration/stats_json.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kFiles = 16;
constexpr uint64_t kSize = 640 * 1024;

// A file read to its end with read(2), as cat would: the bytes, or the
// errno that stopped it.
struct WholeRead {
  std::string bytes;
  int error = 0;
};

WholeRead ReadToEnd(const fs::path& path) {
  WholeRead r;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    r.error = errno;
    return r;
  }
  char buf[128 * 1024];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.error = errno;
      break;
    }
    if (n == 0) break;
    r.bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return r;
}

class WholeObjectsTest : public CorruptCaches {
 protected:
  void SetUp() override {
    std::vector<TreeFile> files;
    for (int i = 0; i < kFiles; ++i) files.push_back({"d/f" + std::to_string(i), kSize});
    StartFederation("whole-objects", files);
    if (IsSkipped() || HasFatalFailure()) return;
    Mount({"--no-prefetch", "--verify-digests", "--block-size", "64K"});
  }
  std::string Original(int i) const { return Exported("d/f" + std::to_string(i)); }
  fs::path Mounted(int i) const { return mnt_ / "d" / ("f" + std::to_string(i)); }
};

TEST_F(WholeObjectsTest, AFileReadToItsEndIsRightOrFailsAndIsRightWhenReadAgain) {
  int failed_first = 0;
  for (int i = 0; i < kFiles; ++i) {
    const std::string want = Original(i);
    ASSERT_EQ(want.size(), kSize);
    WholeRead first = ReadToEnd(Mounted(i));
    if (first.error == 0) {
      EXPECT_TRUE(first.bytes == want) << "f" << i << ": read whole and wrong";
      continue;
    }
    ++failed_first;
    // EIO from the read that reached the end; ESTALE when a read-ahead
    // reached it first and the kernel is dropping the inode's pages.
    EXPECT_TRUE(first.error == EIO || first.error == ESTALE)
        << "f" << i << ": " << strerror(first.error);
    // The copy was dropped and is fetched again from the origin. The kernel
    // drops its pages of the wrong one first (reads meanwhile: ESTALE).
    WholeRead again;
    for (int attempt = 0; attempt < 20; ++attempt) {
      again = ReadToEnd(Mounted(i));
      if (again.error != ESTALE) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(again.error, 0) << "f" << i << ": " << strerror(again.error);
    EXPECT_TRUE(again.bytes == want) << "f" << i << ": read again and wrong";
  }
  // Every file is right now, from the cache.
  for (int i = 0; i < kFiles; ++i) {
    WholeRead r = ReadToEnd(Mounted(i));
    EXPECT_EQ(r.error, 0) << "f" << i;
    EXPECT_TRUE(r.bytes == Original(i)) << "f" << i;
  }
  nlohmann::json s = PerchctlJson(Socket(), {"stats", "--json"});
  // Ten responses a file, a fifth corrupt: nearly every first copy is wrong.
  EXPECT_GE(failed_first, kFiles / 4) << "the fault proxy corrupted little: this proves little";
  EXPECT_GE(s["digest_cache_mismatches"], static_cast<unsigned>(failed_first)) << s.dump();
  EXPECT_GE(s["origin_fallbacks"], 1u) << s.dump();
}

}  // namespace
}  // namespace perch::testing
