// FileBlockStore's trusted runs: which blocks of earlier runs are served
// without a CRC pass after a start (file_block_store.h, "Trusted runs").
// A damaged data byte is what tells the two apart: a trusted block is served
// as it is, an untrusted one fails its check.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/store/file_block_store.h"
#include "tests/fakes/test_values.h"
#include "tests/unit/store/store_dir_test.h"

namespace perch::store {
namespace {

namespace fs = std::filesystem;
using core::BlockKey;
using core::StatusCode;

using testing::Data;

class TrustedRunsTest : public StoreDirTest {
 protected:
  void SetUp() override {
    StoreDirTest::SetUp();
    SetBoot("boot-1");
  }

  void SetBoot(const std::string& id) { std::ofstream(dir_ / "boot_id") << id << "\n"; }
  FileBlockStore Store() {
    return FileBlockStore(dir_.string(), FileBlockStore::kDefaultBlockSize, 16,
                          (dir_ / "boot_id").string());
  }
  FileBlockStore::RunTrust Begin(FileBlockStore& store) {
    auto t = store.BeginRun();
    EXPECT_TRUE(t.ok()) << t.status().message();
    return t.ok() ? *t : FileBlockStore::RunTrust{};
  }
  // Writes kKey in a run of its own, ended cleanly or not, then damages one
  // of its data bytes (as a power cut could, unseen by any header check).
  void WriteInARun(bool clean) {
    FileBlockStore store = Store();
    Begin(store);
    ASSERT_TRUE(store.Write(kKey, data_).ok());
    if (clean) {
      ASSERT_TRUE(store.EndRun().ok());
    }
    const std::string path = store.PathOf(kKey);
    Overwrite(path, fs::file_size(path) - 10, "X");
  }
  // Whether a new run, begun now, serves the damaged block (trusted) or
  // rejects it (checked).
  bool NextRunServesIt() {
    FileBlockStore store = Store();
    Begin(store);
    auto r = store.Read(kKey, 0, data_.size());
    if (r.ok()) return true;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().message();
    return false;
  }

  const BlockKey kKey{"c0ffee", 0};  // a block file (object files: object_file_test.cc)
  const std::string data_ = Data(70000, 1);
};

TEST_F(TrustedRunsTest, AFirstRunOnANewCacheTrustsOnlyItsOwnBlocks) {
  FileBlockStore store = Store();
  auto t = Begin(store);
  EXPECT_FALSE(t.inherited);
  EXPECT_EQ(t.trusted_from, t.run);
  EXPECT_TRUE(fs::exists(dir_ / "run"));
}

TEST_F(TrustedRunsTest, AfterACleanEndTheNextRunTrustsEarlierBlocks) {
  WriteInARun(/*clean=*/true);
  SetBoot("boot-2");  // even after a reboot: the clean end synced everything
  EXPECT_TRUE(NextRunServesIt());
}

TEST_F(TrustedRunsTest, AfterAKillInTheSameBootTheNextRunTrustsEarlierBlocks) {
  WriteInARun(/*clean=*/false);
  EXPECT_TRUE(NextRunServesIt());
}

TEST_F(TrustedRunsTest, AfterAnUncleanEndInAnotherBootEveryEarlierBlockIsChecked) {
  WriteInARun(/*clean=*/false);
  SetBoot("boot-2");
  EXPECT_FALSE(NextRunServesIt());
}

// Trust lost to a crash is not won back by a later clean end: that run did
// not check what the crashed one left.
TEST_F(TrustedRunsTest, ACleanEndAfterACrashDoesNotVouchForTheCrashedRunsBlocks) {
  WriteInARun(/*clean=*/false);
  SetBoot("boot-2");
  {
    FileBlockStore store = Store();
    EXPECT_FALSE(Begin(store).inherited);
    ASSERT_TRUE(store.EndRun().ok());
  }
  EXPECT_FALSE(NextRunServesIt());
}

// The record of a run is replaced before that run writes: a run that dies
// with the OS leaves "not clean", whatever the run before it left.
TEST_F(TrustedRunsTest, ARunThatCrashesAfterACleanOneLosesTheTrust) {
  WriteInARun(/*clean=*/true);
  {
    FileBlockStore store = Store();
    EXPECT_TRUE(Begin(store).inherited);
    ASSERT_TRUE(store.Write(BlockKey{"beef", 0}, Data(100, 2)).ok());
  }  // the OS crashes here: no EndRun
  SetBoot("boot-2");
  EXPECT_FALSE(NextRunServesIt());
}

TEST_F(TrustedRunsTest, AStoreNeverBegunTrustsNothingAndItsBlocksAreNeverTrusted) {
  {
    FileBlockStore store = Store();
    ASSERT_TRUE(store.Write(kKey, data_).ok());
    ASSERT_TRUE(store.EndRun().ok());  // a no-op
    EXPECT_FALSE(fs::exists(dir_ / "run"));
    Overwrite(store.PathOf(kKey), fs::file_size(store.PathOf(kKey)) - 10, "X");
  }
  EXPECT_FALSE(NextRunServesIt());
}

TEST_F(TrustedRunsTest, AnUnreadableRunRecordTrustsNothingOlder) {
  WriteInARun(/*clean=*/true);
  std::ofstream(dir_ / "run", std::ios::trunc) << "not a run record";
  EXPECT_FALSE(NextRunServesIt());
}

// Blocks of format 1 (before run numbers) are read, and always checked.
TEST_F(TrustedRunsTest, AFormatOneBlockIsReadAndChecked) {
  FileBlockStore store = Store();
  Begin(store);
  ASSERT_TRUE(store.Write(kKey, data_).ok());
  ASSERT_TRUE(store.EndRun().ok());
  // Format 1 is format 2 without the run number, which lies in the header's
  // padding: only the format field differs.
  const std::string path = store.PathOf(kKey);
  Overwrite(path, 8, std::string("\x01\0\0\0\0\0\0\0", 8));
  {
    FileBlockStore next = Store();
    Begin(next);
    auto r = next.Read(kKey, 0, data_.size());
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(*r, data_);
  }
  Overwrite(path, fs::file_size(path) - 10, "X");
  EXPECT_FALSE(NextRunServesIt());
}

}  // namespace
}  // namespace perch::store
