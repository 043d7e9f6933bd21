// FetchScheduler and Prefetcher over fakes: the request budget, demand before
// prefetch, fairness between flows, cancel and boost; read-ahead that grows
// and stops when the reader goes away; directory prefetch; hints followed in
// order, a window ahead of the reader.
#include <gtest/gtest.h>

#include <random>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/fetch_scheduler.h"
#include "daemon/core/filesystem.h"
#include "daemon/core/prefetcher.h"
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

// Starts are recorded; fetches end when the test releases them.
struct Recorder {
  std::vector<std::string> started;
  std::map<std::string, std::function<void()>> running;
  size_t concurrent = 0, max_concurrent = 0;

  FetchScheduler::StartFn Task(const std::string& name) {
    return [this, name](std::function<void()> release) {
      started.push_back(name);
      max_concurrent = std::max(max_concurrent, ++concurrent);
      running[name] = std::move(release);
    };
  }
  void Finish(const std::string& name) {
    auto release = std::move(running.at(name));
    running.erase(name);
    --concurrent;
    release();
  }
};

TEST(FetchSchedulerTest, TheBudgetIsNeverExceeded) {
  FetchScheduler s(SchedulerOptions{4, 10000, 0.75});
  Recorder r;
  std::mt19937 rng(7);
  for (int i = 0; i < 60; ++i) {
    auto prio = static_cast<Priority>(rng() % kPriorityCount);
    s.Submit(prio, "flow" + std::to_string(rng() % 3), 100 + rng() % 900,
             r.Task("t" + std::to_string(i)));
    if (rng() % 2 == 0 && !r.running.empty()) r.Finish(r.running.begin()->first);
  }
  while (!r.running.empty()) r.Finish(r.running.begin()->first);
  EXPECT_EQ(r.started.size(), 60u);
  EXPECT_LE(r.max_concurrent, 4u);
  EXPECT_EQ(s.Stats().max_in_flight_seen, r.max_concurrent);
  EXPECT_EQ(s.Stats().in_flight, 0u);

  // Bytes too: two 6000-byte fetches do not fit a 10000-byte budget together.
  s.Submit(Priority::kDemand, "f", 6000, r.Task("big1"));
  s.Submit(Priority::kDemand, "f", 6000, r.Task("big2"));
  EXPECT_EQ(r.running.size(), 1u);
  r.Finish("big1");
  EXPECT_EQ(r.running.count("big2"), 1u);
  r.Finish("big2");
}

TEST(FetchSchedulerTest, DemandOvertakesPrefetch) {
  // Background classes may use 2 of 4 slots: demand always finds room.
  FetchScheduler s(SchedulerOptions{4, 1 << 30, 0.5});
  Recorder r;
  for (int i = 0; i < 5; ++i)
    s.Submit(Priority::kSpeculative, "ns", 1, r.Task("p" + std::to_string(i)));
  EXPECT_EQ(r.started.size(), 2u);
  s.Submit(Priority::kDemand, "ns", 1, r.Task("d0"));
  EXPECT_EQ(r.started.back(), "d0");  // started at once, ahead of three queued prefetches

  // With every slot taken, the next free one goes to demand first, then hint, warm, speculative.
  s.Submit(Priority::kDemand, "ns", 1, r.Task("d1"));
  s.Submit(Priority::kWarm, "w", 1, r.Task("w0"));
  s.Submit(Priority::kHint, "h", 1, r.Task("h0"));
  s.Submit(Priority::kDemand, "ns", 1, r.Task("d2"));
  EXPECT_EQ(r.started.size(), 4u);
  r.Finish("d0");
  EXPECT_EQ(r.started.back(), "d2");  // demand, though submitted last
  r.Finish("p0");
  EXPECT_EQ(r.started.back(), "h0");
  r.Finish("p1");
  EXPECT_EQ(r.started.back(), "w0");
  r.Finish("h0");
  EXPECT_EQ(r.started.back(), "p2");
}

TEST(FetchSchedulerTest, FlowsTakeTurnsWithinAClass) {
  FetchScheduler s(SchedulerOptions{1, 1 << 30, 1.0});
  Recorder r;
  for (int i = 0; i < 3; ++i)
    s.Submit(Priority::kSpeculative, "x", 1, r.Task("x" + std::to_string(i)));
  for (int i = 0; i < 2; ++i)
    s.Submit(Priority::kSpeculative, "y", 1, r.Task("y" + std::to_string(i)));
  while (!r.running.empty()) r.Finish(r.running.begin()->first);
  EXPECT_EQ(r.started, (std::vector<std::string>{"x0", "x1", "y0", "x2", "y1"}));
}

TEST(FetchSchedulerTest, CancelAndBoostQueuedFetches) {
  FetchScheduler s(SchedulerOptions{1, 1 << 30, 1.0});
  Recorder r;
  uint64_t a = s.Submit(Priority::kSpeculative, "ns", 1, r.Task("a"));
  uint64_t b = s.Submit(Priority::kSpeculative, "ns", 1, r.Task("b"));
  uint64_t c = s.Submit(Priority::kSpeculative, "ns", 1, r.Task("c"));
  s.Submit(Priority::kHint, "ns", 1, r.Task("h"));
  EXPECT_FALSE(s.Cancel(a));  // running
  EXPECT_TRUE(s.Cancel(b));
  EXPECT_FALSE(s.Cancel(b));
  s.Boost(c, Priority::kDemand);
  while (!r.running.empty()) r.Finish(r.running.begin()->first);
  EXPECT_EQ(r.started, (std::vector<std::string>{"a", "c", "h"}));
  EXPECT_EQ(s.Stats().cancelled, 1u);
  EXPECT_EQ(s.Stats().boosted, 1u);
}

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
  ASSERT_TRUE(fs_->Read(*h, 0, 500).ok());
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
  auto bytes = fs_->Read(*h, 0, 1500);
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

}  // namespace
}  // namespace perch::core
