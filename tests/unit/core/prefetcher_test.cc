// The Prefetcher over fakes: read-ahead that grows and stops when the reader
// goes away; directory prefetch; hints followed in order, a window ahead of
// the reader. (The scheduler it feeds: fetch_scheduler_test.cc.)
#include "daemon/core/prefetcher.h"

#include <gtest/gtest.h>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/fetch_scheduler.h"
#include "daemon/core/filesystem.h"
#include "tests/fakes/read_bytes.h"
#include "tests/fakes/stack_fixture.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::Data;
using testing::FakeOrigin;
using testing::InlineExecutor;
using testing::MemBlockStore;
using testing::MemIndex;
using testing::P;
using testing::StackConfig;
using testing::StackFixture;

// The cache stack with a scheduler and a prefetcher over a FakeOrigin.
class PrefetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.AddFile("/big.bin", Data(20000, 1));  // 20 blocks of 1000
    for (int i = 0; i < 10; ++i) origin_.AddFile("/h/f" + std::to_string(i), Data(500, 10 + i));
    for (int i = 0; i < 5; ++i) origin_.AddFile("/d/g" + std::to_string(i), Data(1500, 30 + i));
  }

  void Build(PrefetchOptions popts, SchedulerOptions sopts = SchedulerOptions{}) {
    StackConfig config;
    config.scheduler = sopts;
    config.prefetch = true;
    config.prefetch_options = popts;
    ASSERT_TRUE(node_.Build(config).ok());
    scheduler_ = &node_.stack().scheduler();
    reader_ = &node_.mount().reader();
    prefetcher_ = node_.mount().prefetcher();
    fs_ = &node_.mount().fs();
  }

  FileAttr Attr(const std::string& path) { return *fs_->GetAttr(P(path)); }

  std::vector<std::string> LogSince(size_t from) {
    auto log = origin_.ReadLog();
    return {log.begin() + static_cast<long>(from), log.end()};
  }

  StackFixture node_;
  FakeOrigin& origin_ = node_.origin;
  FetchScheduler* scheduler_ = nullptr;
  BlockReader* reader_ = nullptr;
  Prefetcher* prefetcher_ = nullptr;
  FileSystem* fs_ = nullptr;
};

TEST_F(PrefetchTest, HintsAreFollowedInOrderAWindowAheadOfTheReader) {
  PrefetchOptions popts;
  popts.directories = false;
  popts.hint_window = 2;
  Build(popts);
  for (int i = 0; i < 10; ++i) Attr("/h/f" + std::to_string(i));  // metadata known; only data moves
  size_t mark = origin_.ReadLog().size();
  prefetcher_->Hint("job", {P("/h/f5"), P("/h/f2"), P("/h/f9"), P("/h/f0"), P("/h/f7")});
  EXPECT_EQ(LogSince(mark),
            (std::vector<std::string>{"/h/f5@0", "/h/f2@0"}));  // the window: two files

  // The reader opens the first hinted file: the window moves one file on.
  auto h = fs_->Open(P("/h/f5"));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(LogSince(mark), (std::vector<std::string>{"/h/f5@0", "/h/f2@0", "/h/f9@0"}));
  // Reading what was prefetched is a hit, not a fetch.
  ASSERT_TRUE(testing::ReadBytes(*fs_, *h, 0, 500).ok());
  fs_->Release(*h);
  EXPECT_EQ(origin_.ReadLog().size(), mark + 3);

  // A reader that skips ahead moves the window with it.
  h = fs_->Open(P("/h/f0"));
  ASSERT_TRUE(h.ok());
  fs_->Release(*h);
  EXPECT_EQ(LogSince(mark),
            (std::vector<std::string>{"/h/f5@0", "/h/f2@0", "/h/f9@0", "/h/f0@0", "/h/f7@0"}));
  EXPECT_EQ(prefetcher_->stats().hinted_files, 5u);

  // A new list replaces the old one.
  prefetcher_->Hint("job", {P("/h/f1")});
  EXPECT_EQ(LogSince(mark).back(), "/h/f1@0");
}

// Issue #43: the hinted files fetched ahead of the reader stay within a
// byte budget (a share of the quota: a dataset larger than the cache keeps
// the rest), and the announced reads ahead are told to the eviction order.
TEST_F(PrefetchTest, HintsRunAheadWithinTheirBytesAndTellWhatIsReadNext) {
  PrefetchOptions popts;
  popts.directories = false;
  popts.hint_window = 10;
  popts.hint_window_bytes = 1200;  // files of 500 bytes: three at a time
  Build(popts);
  for (int i = 0; i < 10; ++i) Attr("/h/f" + std::to_string(i));
  size_t mark = origin_.ReadLog().size();
  prefetcher_->Hint("job", {P("/h/f4"), P("/h/f1"), P("/h/f8"), P("/h/f3"), P("/h/f6")});
  EXPECT_EQ(LogSince(mark), (std::vector<std::string>{"/h/f4@0", "/h/f1@0", "/h/f8@0"}));
  auto h = fs_->Open(P("/h/f4"));
  ASSERT_TRUE(h.ok());
  fs_->Release(*h);
  // 1,000 bytes ahead of the reader now: one more file.
  EXPECT_EQ(LogSince(mark), (std::vector<std::string>{"/h/f4@0", "/h/f1@0", "/h/f8@0", "/h/f3@0"}));
  std::vector<std::pair<std::string, uint64_t>> next;
  prefetcher_->FutureUses(
      3, [&](const ObjectPath& p, uint64_t ahead) { next.emplace_back(p.str(), ahead); });
  EXPECT_EQ(next, (std::vector<std::pair<std::string, uint64_t>>{
                      {"/h/f1", 0}, {"/h/f8", 1}, {"/h/f3", 2}}));
}

TEST_F(PrefetchTest, AReaderWaitingOnAQueuedPrefetchMovesItToTheFront) {
  PrefetchOptions popts;
  popts.directories = false;
  Build(popts, SchedulerOptions{1, 1 << 30, 1.0});
  FileAttr a = Attr("/big.bin");
  const std::string id = ObjectIdFor("fed", P("/big.bin"), a);
  origin_.Hold(true);
  size_t mark = origin_.ReadLog().size();
  for (uint64_t b = 0; b < 4; ++b) {
    reader_->Prefetch(P("/big.bin"), ObjectVersion{a.size, a.etag}, id, b,
                      FetchClass{Priority::kSpeculative, ""});
  }
  std::optional<Result<Bytes>> got;
  reader_->Read(P("/big.bin"), ObjectVersion{a.size, a.etag}, id, ByteRange{3000, 10},
                DeadlineAfter(std::chrono::seconds(5)),
                [&](Result<Bytes> r) { got = std::move(r); });
  EXPECT_EQ(scheduler_->Stats().boosted, 1u);
  while (origin_.ReleaseOne()) {
  }
  origin_.Hold(false);
  ASSERT_TRUE(got.has_value() && got->ok());
  EXPECT_EQ(LogSince(mark), (std::vector<std::string>{"/big.bin@0", "/big.bin@3000",
                                                      "/big.bin@1000", "/big.bin@2000"}));
  EXPECT_EQ(reader_->stats().misses, 4u);
}

TEST_F(PrefetchTest, ReadAheadGrowsAndStopsWhenTheReaderGoesAway) {
  PrefetchOptions popts;
  popts.directories = false;
  popts.max_window_bytes = 8000;  // 8 blocks
  Build(popts, SchedulerOptions{2, 1 << 30, 1.0});
  FileAttr a = Attr("/big.bin");
  const std::string id = ObjectIdFor("fed", P("/big.bin"), a);
  origin_.Hold(true);
  prefetcher_->Opened(1, P("/big.bin"), a, id);
  prefetcher_->Read(1, 0, 1000);     // window 1: block 1
  prefetcher_->Read(1, 1000, 1000);  // block 1, window 2: blocks 2, 3
  prefetcher_->Read(1, 2000, 1000);  // block 2, window 4: up to block 6
  EXPECT_EQ(prefetcher_->stats().sequential_blocks, 6u);
  EXPECT_EQ(origin_.reads, 2);  // the budget: two in flight, the rest queued
  prefetcher_->Released(1);
  EXPECT_EQ(prefetcher_->stats().withdrawn, 4u);
  origin_.Hold(false);
  origin_.Release();
  EXPECT_EQ(origin_.reads, 2);  // nothing queued ran after the reader left
  EXPECT_EQ(scheduler_->Stats().queued[static_cast<size_t>(Priority::kSpeculative)], 0u);

  // A jump elsewhere withdraws what was queued for the old position.
  origin_.Hold(true);
  prefetcher_->Opened(2, P("/big.bin"), a, id);
  prefetcher_->Read(2, 10000, 1000);
  prefetcher_->Read(2, 11000, 1000);
  prefetcher_->Read(2, 12000, 1000);  // blocks 11..16 asked for, two in flight
  prefetcher_->Read(2, 0, 1000);      // the pattern broke
  EXPECT_GE(prefetcher_->stats().withdrawn, 7u);
  prefetcher_->Released(2);
  origin_.Hold(false);
  origin_.Release();
}

TEST_F(PrefetchTest, OpeningAFileFetchesItsSiblingsOnce) {
  Build(PrefetchOptions{});
  ASSERT_TRUE(fs_->ReadDir(P("/d")).ok());
  size_t mark = origin_.ReadLog().size();
  auto h = fs_->Open(P("/d/g2"));
  ASSERT_TRUE(h.ok());
  // After g2 in name order, wrapping around; every block of each (1500 bytes: two).
  EXPECT_EQ(LogSince(mark),
            (std::vector<std::string>{"/d/g3@0", "/d/g3@1000", "/d/g4@0", "/d/g4@1000", "/d/g0@0",
                                      "/d/g0@1000", "/d/g1@0", "/d/g1@1000"}));
  EXPECT_EQ(prefetcher_->stats().directory_files, 4u);
  fs_->Release(*h);
  h = fs_->Open(P("/d/g3"));
  ASSERT_TRUE(h.ok());
  auto bytes = testing::ReadBytes(*fs_, *h, 0, 1500);
  ASSERT_TRUE(bytes.ok());
  fs_->Release(*h);
  EXPECT_EQ(origin_.ReadLog().size(), mark + 8);  // a hit; the directory is not listed again

  // Directories over the limit are left alone.
  PrefetchOptions small;
  small.dir_max_entries = 3;
  Build(small);
  mark = origin_.ReadLog().size();
  h = fs_->Open(P("/h/f0"));
  ASSERT_TRUE(h.ok());
  fs_->Release(*h);
  EXPECT_EQ(origin_.ReadLog().size(), mark);
}

TEST_F(PrefetchTest, OpeningAFileListsTheNextDirectoryAheadButFetchesNothingThere) {
  for (const char* f : {"/s/a/x0", "/s/a/x1", "/s/b/y0", "/s/b/y1", "/s/c/z0", "/s/note.txt"})
    origin_.AddFile(f, Data(100, 7));
  Build(PrefetchOptions{});
  auto h = fs_->Open(P("/s/a/x0"));
  ASSERT_TRUE(h.ok());
  fs_->Release(*h);
  EXPECT_EQ(prefetcher_->stats().directories_listed_ahead, 1u);
  const int lists = origin_.lists.load();
  ASSERT_TRUE(fs_->ReadDir(P("/s/b")).ok());  // listed ahead: no round trip now
  EXPECT_EQ(origin_.lists.load(), lists);
  ASSERT_TRUE(fs_->ReadDir(P("/s/c")).ok());  // only the next one
  EXPECT_EQ(origin_.lists.load(), lists + 1);
  for (const std::string& r : origin_.ReadLog()) EXPECT_FALSE(r.starts_with("/s/b/")) << r;

  // The last directory has no next one.
  h = fs_->Open(P("/s/c/z0"));
  ASSERT_TRUE(h.ok());
  fs_->Release(*h);
  EXPECT_EQ(prefetcher_->stats().directories_listed_ahead, 1u);

  // A directory too large to prefetch still has the next one listed.
  PrefetchOptions small;
  small.dir_max_entries = 1;
  Build(small);
  const size_t mark = origin_.ReadLog().size();
  h = fs_->Open(P("/s/a/x1"));
  ASSERT_TRUE(h.ok());
  fs_->Release(*h);
  EXPECT_EQ(origin_.ReadLog().size(), mark);  // nothing prefetched
  EXPECT_EQ(prefetcher_->stats().directories_listed_ahead, 1u);
}

}  // namespace
}  // namespace perch::core
