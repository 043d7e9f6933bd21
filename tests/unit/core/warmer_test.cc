// The Warmer over fakes: a warm fetches what is missing once, reports what
// it could not fetch, bounds its blocks in flight, stops a file at its first
// failed block, cancels, names paths as asked, keeps the last finished jobs,
// and delivers progress in order (also when tasks run on many threads).
#include "daemon/core/warmer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/cache_stack.h"
#include "daemon/core/filesystem.h"
#include "tests/fakes/read_bytes.h"
#include "tests/fakes/stack_fixture.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::Data;
using testing::FakeOrigin;
using testing::InlineExecutor;
using testing::P;
using testing::StackFixture;

class WarmerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.AddFile("/d/a.bin", Data(2500, 1));  // 3 blocks of 1000
    origin_.AddFile("/d/b.bin", Data(900, 2));
    origin_.AddFile("/d/sub/c.txt", "hello");
    for (int i = 0; i < 6; ++i) origin_.AddFile("/big/x" + std::to_string(i), Data(900, 10 + i));
    ASSERT_TRUE(node_.Build().ok());
    catalog_ = &node_.stack().catalog();
    reader_ = &node_.mount().reader();
    fs_ = &node_.mount().fs();
    warmer_ = &node_.mount().warmer();
  }

  void ReadAll(const std::string& path) {
    auto h = fs_->Open(P(path));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    auto bytes = testing::ReadBytes(*fs_, *h, 0, 1 << 20);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    fs_->Release(*h);
  }

  size_t Listed(const std::string& prefix) {
    return node_.mount().List(P(prefix), "", 1000).size();
  }

  WarmProgress Warm(std::vector<ObjectPath> paths, bool recursive) {
    auto job = warmer_->Start(std::move(paths), recursive, nullptr);
    EXPECT_TRUE(job->finished());  // inline executor, synchronous origin
    return job->Progress();
  }

  // A Warmer of the fixture's mount with `options`, on the inline executor.
  std::unique_ptr<Warmer> WarmerWith(WarmerOptions options) {
    return std::make_unique<Warmer>(*fs_, *reader_, *catalog_, node_.disk, std::move(options));
  }

  // Metadata known beforehand, so that only the block fetches wait on the origin.
  void KnowMetadata(const std::string& dir) {
    ASSERT_TRUE(fs_->GetAttr(P(dir)).ok());
    auto entries = fs_->ReadDir(P(dir));
    ASSERT_TRUE(entries.ok());
    for (const DirEntry& e : *entries) ASSERT_TRUE(fs_->GetAttr(P(dir + "/" + e.name)).ok());
  }

  StackFixture node_;
  FakeOrigin& origin_ = node_.origin;
  CacheCatalog* catalog_ = nullptr;
  BlockReader* reader_ = nullptr;
  FileSystem* fs_ = nullptr;
  Warmer* warmer_ = nullptr;
};

TEST_F(WarmerTest, WarmFetchesEachMissingBlockOnce) {
  ReadAll("/d/b.bin");
  const int before = origin_.reads;
  WarmProgress p = Warm({P("/d")}, true);
  EXPECT_TRUE(p.listing_done);
  EXPECT_EQ(p.files_total, 3u);
  EXPECT_EQ(p.files_done, 3u);
  EXPECT_EQ(p.files_failed, 0u);
  EXPECT_EQ(p.bytes_total, 3405u);
  EXPECT_EQ(p.bytes_done, 3405u);
  EXPECT_EQ(origin_.reads, before + 4);  // a.bin's 3 blocks and c.txt; b.bin was cached
  EXPECT_EQ(Listed("/d"), 3u);

  p = Warm({P("/d")}, true);
  EXPECT_EQ(p.files_done, 3u);
  EXPECT_EQ(origin_.reads, before + 4);  // nothing left to fetch

  WarmProgress flat = Warm({P("/big")}, false);
  EXPECT_EQ(flat.files_done, 6u);
  WarmProgress shallow = Warm({P("/d"), P("/big/x0")}, false);
  EXPECT_EQ(shallow.files_total, 3u);  // a.bin, b.bin, x0: not d/sub
  ASSERT_EQ(warmer_->Jobs().size(), 4u);
  EXPECT_TRUE(warmer_->Jobs().back().finished);
}

TEST_F(WarmerTest, WarmReportsWhatItCouldNotFetch) {
  WarmProgress p = Warm({P("/nope"), P("/d/sub")}, true);
  EXPECT_TRUE(p.finished);
  EXPECT_EQ(p.files_failed, 1u);
  EXPECT_EQ(p.files_done, 1u);
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_NE(p.errors[0].find("/nope"), std::string::npos);

  origin_.FailWith(UnavailableError("down"));
  p = Warm({P("/big/x1")}, true);
  EXPECT_EQ(p.files_failed, 1u);
  EXPECT_EQ(p.files_done, 0u);
}

TEST_F(WarmerTest, CancelStopsIssuingFetches) {
  // The listing is known, so only the block fetches wait.
  ASSERT_TRUE(fs_->GetAttr(P("/big")).ok());
  ASSERT_TRUE(fs_->ReadDir(P("/big")).ok());
  const int before = origin_.reads;
  origin_.Hold(true);
  auto job = warmer_->Start({P("/big")}, true, nullptr);
  EXPECT_FALSE(job->finished());
  job->Cancel();
  EXPECT_FALSE(job->finished());  // fetches in flight still count
  origin_.Hold(false);
  origin_.Release();
  EXPECT_TRUE(job->finished());
  WarmProgress p = job->Progress();
  EXPECT_TRUE(p.cancelled);
  EXPECT_EQ(origin_.reads, before + 6);  // all six were in flight before the cancel; none after
}

// Runs every task on a thread of its own, so that warm bookkeeping races.
class ThreadPerTaskExecutor : public Executor {
 public:
  ~ThreadPerTaskExecutor() override { Join(); }
  void Post(std::function<void()> task) override {
    std::lock_guard<std::mutex> l(mu_);
    threads_.emplace_back(std::move(task));
  }
  void PostAfter(std::chrono::milliseconds, std::function<void()> task) override {
    Post(std::move(task));
  }
  void Join() {
    for (;;) {
      std::vector<std::thread> batch;
      {
        std::lock_guard<std::mutex> l(mu_);
        batch.swap(threads_);
      }
      if (batch.empty()) return;
      for (auto& t : batch) t.join();
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

// Issue 14: the walk stays at most `max_files_queued` files ahead of the
// fetches (it pauses, and a completion resumes it), so a warm of a million
// files never holds them all; it still finds and fetches every file.
TEST_F(WarmerTest, WarmWalkPausesWhileFilesWaitForFetches) {
  // The listing is known, so only the block fetches wait.
  ASSERT_TRUE(fs_->GetAttr(P("/big")).ok());
  ASSERT_TRUE(fs_->ReadDir(P("/big")).ok());
  InlineExecutor jobs;
  WarmerOptions opts;
  opts.max_blocks_in_flight = 1;
  opts.max_files_queued = 2;
  Warmer warmer(*fs_, *reader_, *catalog_, jobs, opts);
  origin_.Hold(true);
  auto job = warmer.Start({P("/big")}, true, nullptr);
  uint64_t max_ahead = 0;
  for (int i = 0; i < 20 && !job->finished(); ++i) {
    WarmProgress p = job->Progress();
    // Found but not yet done: one in flight and at most two waiting.
    max_ahead = std::max(max_ahead, p.files_total - p.files_done);
    EXPECT_FALSE(p.listing_done && p.files_total < 6u);
    origin_.ReleaseOne();
  }
  origin_.Hold(false);
  origin_.Release();
  ASSERT_TRUE(job->finished());
  WarmProgress p = job->Progress();
  EXPECT_TRUE(p.listing_done);
  EXPECT_EQ(p.files_total, 6u);
  EXPECT_EQ(p.files_done, 6u);
  EXPECT_EQ(max_ahead, 3u);
  for (int i = 0; i < 6; ++i) {
    const ObjectPath path = P("/big/x" + std::to_string(i));
    auto attr = fs_->GetAttr(path);
    ASSERT_TRUE(attr.ok());
    EXPECT_TRUE(catalog_->Contains(BlockKey{fs_->ObjectId(path, *attr), 0})) << path.str();
  }
}

// Regression: progress snapshots taken on two threads were delivered out of
// order, so a warm stream could end on an unfinished snapshot and never
// finish. The walk's last snapshot is held back here while the fetches
// complete on other threads; the finished snapshot must still come last.
TEST_F(WarmerTest, ProgressReachesListenersInOrderAndEndsFinished) {
  ThreadPerTaskExecutor threads;
  std::atomic<bool> walk_waiting{false};
  std::promise<void> walk_held;
  WarmerOptions opts;
  opts.before_notify_for_test = [&](const WarmProgress& p) {
    if (p.listing_done && !p.finished && !walk_waiting.exchange(true)) {
      walk_held.set_value();
      // Holds the walk's snapshot while the fetches complete on other
      // threads. A sleep, not a wait for them: in order delivery may make a
      // completion's snapshot wait for this one, which a wait would deadlock.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  };
  Warmer warmer(*fs_, *reader_, *catalog_, threads, opts);
  std::mutex mu;
  std::vector<WarmProgress> seen;
  ASSERT_TRUE(fs_->GetAttr(P("/big")).ok());  // metadata known: only the block fetches wait
  ASSERT_TRUE(fs_->ReadDir(P("/big")).ok());
  origin_.Hold(true);
  auto job = warmer.Start({P("/big")}, true, [&](const WarmProgress& p) {
    std::lock_guard<std::mutex> l(mu);
    seen.push_back(p);
  });
  walk_held.get_future().wait();
  origin_.Hold(false);
  origin_.Release();  // the fetches complete while the walk's snapshot waits
  threads.Join();
  ASSERT_TRUE(job->finished());
  std::lock_guard<std::mutex> l(mu);
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().finished);
  EXPECT_EQ(seen.back().files_done, 6u);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
}

TEST_F(WarmerTest, BoundsTheBlocksOfAJobInFlight) {
  WarmerOptions options;
  options.max_blocks_in_flight = 2;
  auto warmer = WarmerWith(options);
  KnowMetadata("/d");
  const int before = origin_.reads;
  origin_.Hold(true);
  auto job = warmer->Start({P("/d/a.bin")}, false, nullptr);
  EXPECT_EQ(origin_.reads, before + 2);  // of a.bin's 3 blocks
  ASSERT_TRUE(origin_.ReleaseOne());
  EXPECT_EQ(origin_.reads, before + 3);  // a slot freed: the third block goes
  EXPECT_FALSE(job->finished());
  origin_.Hold(false);
  origin_.Release();
  ASSERT_TRUE(job->finished());
  EXPECT_EQ(job->Progress().files_done, 1u);
  EXPECT_EQ(job->Progress().bytes_done, 2500u);
}

TEST_F(WarmerTest, AFileStopsAtItsFirstFailedBlock) {
  WarmerOptions options;
  options.max_blocks_in_flight = 1;  // one block at a time: the failure is seen before the next
  auto warmer = WarmerWith(options);
  KnowMetadata("/d");
  const int before = origin_.reads;
  origin_.ShortBodies(true);  // every block comes back one byte short: kCorrupt
  auto job = warmer->Start({P("/d/a.bin")}, false, nullptr);
  ASSERT_TRUE(job->finished());
  WarmProgress p = job->Progress();
  EXPECT_EQ(p.files_failed, 1u);
  EXPECT_EQ(p.files_done, 0u);
  ASSERT_EQ(p.errors.size(), 1u);
  EXPECT_NE(p.errors[0].find("/d/a.bin"), std::string::npos) << p.errors[0];
  EXPECT_EQ(origin_.reads, before + 1);  // its other blocks were not asked for
  EXPECT_EQ(Listed("/d"), 0u);
}

TEST_F(WarmerTest, NamesPathsAsAsked) {
  WarmerOptions options;
  options.path_name = [](const ObjectPath& p) { return "/fed" + p.str(); };
  auto warmer = WarmerWith(options);
  auto job = warmer->Start({P("/d/b.bin"), P("/big")}, true, nullptr);
  ASSERT_TRUE(job->finished());
  EXPECT_EQ(job->Progress().paths, (std::vector<std::string>{"/fed/d/b.bin", "/fed/big"}));
  EXPECT_EQ(job->Progress().files_done, 7u);
}

TEST_F(WarmerTest, KeepsTheLastFinishedJobs) {
  WarmerOptions options;
  options.finished_jobs_kept = 2;
  auto warmer = WarmerWith(options);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(warmer->Start({P("/big/x" + std::to_string(i))}, false, nullptr)->finished());
  }
  // Finished jobs are pruned as the next one starts: the two kept, and the newest.
  std::vector<WarmProgress> jobs = warmer->Jobs();
  ASSERT_EQ(jobs.size(), 3u);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(jobs[i].id, i + 2);
    EXPECT_TRUE(jobs[i].finished);
  }
  ASSERT_TRUE(warmer->Start({P("/d")}, true, nullptr)->finished());
  EXPECT_EQ(warmer->Jobs().front().id, 3u);
}

TEST_F(WarmerTest, ShutdownCancelsEveryJob) {
  auto warmer = WarmerWith(WarmerOptions{});
  KnowMetadata("/big");
  const int before = origin_.reads;
  origin_.Hold(true);
  auto job = warmer->Start({P("/big")}, true, nullptr);
  EXPECT_EQ(origin_.reads, before + 6);
  // The parked fetches never come back while held: Shutdown gives up waiting at once.
  warmer->Shutdown(std::chrono::milliseconds(0));
  EXPECT_TRUE(job->Progress().cancelled);
  origin_.Hold(false);
  origin_.Release();
  EXPECT_TRUE(job->finished());
  EXPECT_EQ(origin_.reads, before + 6);
}

}  // namespace
}  // namespace perch::core
