// Issue #30's acceptance, end to end: perch-devfed with two real XCache
// servers in front of a real XRootD origin, and a proxy that flips one byte
// in a fifth of the caches' response bodies (--fault-corrupt 0.2, never the
// origin's). 200 files read cold through the real perchd mount with its
// defaults are all byte-exact; the mismatches are counted and every object
// was checked against its digest. With --no-verify-digests the same
// federation hands the mount wrong bytes: the test shows it, so that it
// cannot pass by corrupting nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/corrupt_caches.h"
#include "tests/integration/stats_json.h"

namespace perch::testing {
namespace {

constexpr int kFiles = 200;

class CorruptCachesTest : public CorruptCaches {
 protected:
  void SetUp() override {
    std::vector<TreeFile> files;
    for (int i = 0; i < kFiles; ++i) {
      // 1 to 200 KiB: each one block, read whole and so checked.
      files.push_back({"d/f" + std::to_string(i), 1024 + static_cast<uint64_t>(i) * 1021});
    }
    StartFederation("corrupt-caches", files);
  }

  void Mount(bool verify) {
    // No prefetch: the reads come one after another, in the test's order.
    CorruptCaches::Mount(verify ? std::vector<std::string>{"--no-prefetch"}
                                : std::vector<std::string>{"--no-prefetch", "--no-verify-digests"});
  }
  // Every file read through the mount: those whose read failed (an error
  // from open or read) and those read whole whose bytes differ from the
  // export, apart: a failed read is not wrong bytes, and both are failures.
  struct Reads {
    int failed = 0;
    int wrong = 0;
    std::string failures;  // the first few, with their errors
  };
  Reads ReadAll() {
    Reads r;
    for (int i = 0; i < kFiles; ++i) {
      const std::string rel = "d/f" + std::to_string(i);
      std::string got;
      int err = 0;
      int fd = ::open((mnt_ / rel).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        err = errno;
      } else {
        char buf[64 << 10];
        for (;;) {
          ssize_t n = ::read(fd, buf, sizeof buf);
          if (n == 0) break;
          if (n < 0) {
            err = errno;
            break;
          }
          got.append(buf, static_cast<size_t>(n));
        }
        ::close(fd);
      }
      if (err != 0) {
        if (r.failed++ < 5) r.failures += rel + ": " + std::strerror(err) + "\n";
      } else if (got != Exported(rel)) {
        r.wrong++;
      }
    }
    return r;
  }
  // The warnings perchd logged (why reads failed or were fetched again).
  std::string Warnings() const {
    std::istringstream log(perchd_.Log());
    std::string out;
    for (std::string line; std::getline(log, line);) {
      if (line.find(" info ") == std::string::npos) out += line + "\n";
    }
    return out;
  }
};

TEST_F(CorruptCachesTest, TwoHundredColdFilesAreByteExactAndTheMismatchesCounted) {
  Mount(true);
  Reads reads = ReadAll();
  EXPECT_EQ(reads.wrong, 0) << "wrong bytes handed to a reader\n" << Warnings();
  EXPECT_EQ(reads.failed, 0) << reads.failures << Warnings();
  nlohmann::json s = PerchctlJson(Socket(), {"stats", "--json"});
  // A fifth of the caches' answers is corrupt; a cache that sent a wrong
  // body sorts last for server_penalty (30 s), so once both have, the origin
  // serves: at least one mismatch, often a few.
  EXPECT_GE(s["digest_mismatches"], 1u) << s.dump();
  EXPECT_EQ(s["digests_verified"], static_cast<unsigned>(kFiles)) << s.dump();
}

TEST_F(CorruptCachesTest, WithoutVerificationTheSameCachesHandOutWrongBytes) {
  Mount(false);
  Reads reads = ReadAll();
  EXPECT_EQ(reads.failed, 0) << reads.failures << Warnings();
  EXPECT_GE(reads.wrong, 5) << "the fault proxy corrupted nothing: the test above proves nothing";
}

}  // namespace
}  // namespace perch::testing
