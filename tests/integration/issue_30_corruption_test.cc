// Issue #30's acceptance, end to end: perch-devfed with two real XCache
// servers in front of a real XRootD origin, and a proxy that flips one byte
// in a fifth of the caches' response bodies (--fault-corrupt 0.2, never the
// origin's). 200 files read cold through the real perchd mount with
// --verify-digests are all byte-exact; the mismatches are counted and every
// object was checked against its digest. Without verification (the default)
// the same federation hands the mount wrong bytes: the test shows it, so
// that it cannot pass by corrupting nothing.
#include <gtest/gtest.h>

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
    CorruptCaches::Mount(verify ? std::vector<std::string>{"--verify-digests"}
                                : std::vector<std::string>{});
  }
  // How many files read through the mount differ from the export.
  int WrongFiles() {
    int wrong = 0;
    for (int i = 0; i < kFiles; ++i) {
      const std::string rel = "d/f" + std::to_string(i);
      if (ReadLocalFile(mnt_ / rel) != Exported(rel)) ++wrong;
    }
    return wrong;
  }
};

TEST_F(CorruptCachesTest, TwoHundredColdFilesAreByteExactAndTheMismatchesCounted) {
  Mount(true);
  EXPECT_EQ(WrongFiles(), 0);
  nlohmann::json s = PerchctlJson(Socket(), {"stats", "--json"});
  // A fifth of first answers is corrupt: about 40 mismatches; at least a few.
  EXPECT_GE(s["digest_mismatches"], 5u) << s.dump();
  EXPECT_EQ(s["digests_verified"], static_cast<unsigned>(kFiles)) << s.dump();
}

TEST_F(CorruptCachesTest, WithoutVerificationTheSameCachesHandOutWrongBytes) {
  Mount(false);
  EXPECT_GE(WrongFiles(), 5) << "the fault proxy corrupted nothing: the test above proves nothing";
}

}  // namespace
}  // namespace perch::testing
