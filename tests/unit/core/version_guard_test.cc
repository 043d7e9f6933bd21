// core::VersionGuard through the stack perchd builds (CacheStack over a
// FakeOrigin): an object replaced at the origin between two of its blocks is
// never read as a mix; its reader gets kStale, a new open reads the new
// version, the old blocks go; an unchanged object costs one question per
// interval, and none while nothing of it is stored.
#include "daemon/core/version_guard.h"

#include <gtest/gtest.h>

#include "tests/fakes/read_bytes.h"
#include "tests/fakes/stack_fixture.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::Data;
using testing::P;
using testing::StackConfig;
using testing::StackFixture;

using testing::kBlock;

class VersionGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    node_.origin.AddFile("/f", old_, 1700000000);
    Build(std::chrono::milliseconds(0));
  }
  void Build(std::chrono::milliseconds interval) {
    StackConfig config;
    config.block_size = kBlock;
    config.version_check_interval = interval;
    ASSERT_TRUE(node_.Build(config).ok());
  }
  FileSystem& fs() { return node_.mount().fs(); }
  Result<Bytes> ReadAt(uint64_t handle, uint64_t offset, uint64_t size) {
    return testing::ReadBytes(fs(), handle, offset, size);
  }
  std::string ReadWhole(const std::string& path) {
    auto h = fs().Open(P(path));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return {};
    auto r = testing::ReadBytes(fs(), *h, 0, 1 << 20);
    fs().Release(*h);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::string();
  }
  // The same size, another modification time: what `cp` over it leaves.
  void Replace() { node_.origin.AddFile("/f", new_, 1700000100); }

  StackFixture node_;
  const std::string old_ = Data(3 * kBlock, 1);
  const std::string new_ = Data(3 * kBlock, 2);
};

TEST_F(VersionGuardTest, AnObjectReplacedBetweenTwoBlocksIsNeverReadAsAMix) {
  auto h = fs().Open(P("/f"));
  ASSERT_TRUE(h.ok());
  auto first = ReadAt(*h, 0, kBlock);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, old_.substr(0, kBlock));
  const std::string old_id = fs().ObjectId(P("/f"), FileAttr{false, 3 * kBlock, 1700000000, ""});
  EXPECT_GT(node_.catalog().CachedBytes(old_id), 0u);

  Replace();
  // Without the guard this read returned the new version's second block
  // after the old version's first.
  auto second = ReadAt(*h, kBlock, kBlock);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kStale) << second.status().ToString();
  // Every later fetch of the old version fails too, without asking again.
  const int stats = node_.origin.stats.load();
  auto third = ReadAt(*h, 2 * kBlock, kBlock);
  EXPECT_EQ(third.status().code(), StatusCode::kStale);
  EXPECT_EQ(node_.origin.stats.load(), stats);
  // A block of the old version still cached is the old version's: no mix.
  auto again = ReadAt(*h, 0, kBlock);
  if (again.ok()) {
    EXPECT_EQ(*again, old_.substr(0, kBlock));
  }
  fs().Release(*h);

  // A new open reads the new version whole; the old blocks are gone.
  EXPECT_EQ(ReadWhole("/f"), new_);
  EXPECT_EQ(node_.catalog().CachedBytes(old_id), 0u);
  EXPECT_EQ(node_.mount().guard().replacements(), 1u);
}

TEST_F(VersionGuardTest, AReplacementWhilePerchdWasDownIsFoundBeforeTheNextBlock) {
  Build(std::chrono::hours(1));  // even a long interval: a restart forgets every confirmation
  auto h = fs().Open(P("/f"));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(ReadAt(*h, 0, kBlock).ok());
  fs().Release(*h);
  Replace();
  Build(std::chrono::hours(1));  // restart: the index still says the old version (file_ttl)
  h = fs().Open(P("/f"));
  ASSERT_TRUE(h.ok());
  auto r = ReadAt(*h, 0, 3 * kBlock);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kStale);
  fs().Release(*h);
  EXPECT_EQ(ReadWhole("/f"), new_);
}

TEST_F(VersionGuardTest, ARemovedObjectIsStaleAndThenNotFound) {
  auto h = fs().Open(P("/f"));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(ReadAt(*h, 0, kBlock).ok());
  node_.origin.RemoveFile("/f");
  auto r = ReadAt(*h, kBlock, kBlock);
  EXPECT_EQ(r.status().code(), StatusCode::kStale);
  fs().Release(*h);
  EXPECT_EQ(fs().Open(P("/f")).status().code(), StatusCode::kNotFound);
}

TEST_F(VersionGuardTest, AnUnchangedObjectIsAskedAboutOncePerIntervalAndNeverWhenNothingIsStored) {
  Build(std::chrono::hours(1));
  auto h = fs().Open(P("/f"));
  ASSERT_TRUE(h.ok());
  const int stats = node_.origin.stats.load();
  // Nothing stored: the first block is the origin's version of now.
  ASSERT_TRUE(ReadAt(*h, 0, kBlock).ok());
  ASSERT_TRUE(ReadAt(*h, kBlock, kBlock).ok());
  EXPECT_EQ(node_.origin.stats.load(), stats);
  EXPECT_EQ(node_.mount().guard().confirmations(), 0u);
  fs().Release(*h);

  Build(std::chrono::hours(1));  // a restart: blocks 0 and 1 stored, never confirmed since
  h = fs().Open(P("/f"));
  ASSERT_TRUE(h.ok());
  const int before = node_.origin.stats.load();
  auto r = ReadAt(*h, 0, 3 * kBlock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, old_);
  EXPECT_EQ(node_.origin.stats.load(), before + 1);
  EXPECT_EQ(node_.mount().guard().confirmations(), 1u);
  EXPECT_EQ(node_.mount().guard().replacements(), 0u);
  fs().Release(*h);
}

TEST_F(VersionGuardTest, WithoutAnAnswerFromTheOriginTheFetchGoesOn) {
  Build(std::chrono::hours(1));
  auto h = fs().Open(P("/f"));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(ReadAt(*h, 0, kBlock).ok());
  fs().Release(*h);
  Build(std::chrono::hours(1));
  h = fs().Open(P("/f"));
  ASSERT_TRUE(h.ok());
  // The origin answers reads but not questions (its PROPFIND is refused).
  node_.origin.FailStatsWith(UnavailableError("PROPFIND refused"));
  const int stats = node_.origin.stats.load();
  auto r = ReadAt(*h, kBlock, kBlock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, old_.substr(kBlock, kBlock));
  // Asked once; not again (nor waited for) before the next fetch of the interval.
  EXPECT_EQ(node_.origin.stats.load(), stats + 1);
  r = ReadAt(*h, 2 * kBlock, kBlock);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(node_.origin.stats.load(), stats + 1);
  fs().Release(*h);
}

}  // namespace
}  // namespace perch::core
