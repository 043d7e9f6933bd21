// Hardening issue #11 (items 1 and 9) in the core: what a server says about
// sizes and names is bounded where it enters (NamespaceCache) and the
// consumers stay bounded anyway. A decorator over FakeOrigin makes chosen
// files claim huge sizes (their bytes read as zeros) as a hostile listing
// would; the real NamespaceCache, Prefetcher and Warmer run over it.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <thread>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/fetch_scheduler.h"
#include "daemon/core/filesystem.h"
#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/prefetcher.h"
#include "daemon/core/warmer.h"
#include "tests/fakes/fake_origin.h"
#include "tests/fakes/mem_block_store.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/read_bytes.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::FakeOrigin;
using testing::InlineExecutor;
using testing::MemBlockStore;
using testing::MemIndex;
using testing::P;

// FakeOrigin, except that the files given to SetSize() claim that size and
// read as zeros (slowly, 1 ms a range, or failing when told).
class HugeSizeOrigin : public Origin {
 public:
  explicit HugeSizeOrigin(FakeOrigin& base) : base_(base) {}
  void SetSize(const std::string& path, uint64_t size) { sizes_[path] = size; }
  void FailReads(bool on) { fail_ = on; }

  void Stat(const ObjectPath& path, Deadline deadline,
            std::function<void(Result<FileAttr>)> done) override {
    base_.Stat(path, deadline, [this, path, done = std::move(done)](Result<FileAttr> r) {
      if (r.ok()) Patch(path.str(), &*r);
      done(std::move(r));
    });
  }
  void List(const ObjectPath& path, Deadline deadline,
            std::function<void(Result<std::vector<DirEntry>>)> done) override {
    base_.List(path, deadline,
               [this, path, done = std::move(done)](Result<std::vector<DirEntry>> r) {
                 if (r.ok()) {
                   for (DirEntry& e : *r)
                     Patch((path.IsRoot() ? "" : path.str()) + "/" + e.name, &e.attr);
                 }
                 done(std::move(r));
               });
  }
  void ReadRange(const ObjectPath& path, const ObjectVersion& version, ByteRange range,
                 Deadline deadline, std::function<void(Result<FetchedBytes>)> done) override {
    if (!sizes_.count(path.str()))
      return base_.ReadRange(path, version, range, deadline, std::move(done));
    huge_reads++;
    if (fail_) return done(UnavailableError("injected: no such object", FailureSite::kOrigin));
    // A far origin: a lazy warm must still be running when the test cancels it.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    done(FetchedBytes{Bytes(range.length, '\0'), true, {}, -1, {}});
  }

  std::atomic<int> huge_reads{0};

 private:
  void Patch(const std::string& path, FileAttr* a) {
    if (auto it = sizes_.find(path); it != sizes_.end()) a->size = it->second;
  }
  FakeOrigin& base_;
  std::map<std::string, uint64_t> sizes_;  // set before use
  std::atomic<bool> fail_{false};
};

// One worker thread, so that warm completions do not recurse into each other.
class WorkerExecutor : public Executor {
 public:
  WorkerExecutor() : thread_([this] { Run(); }) {}
  ~WorkerExecutor() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Post(std::function<void()> task) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  void PostAfter(std::chrono::milliseconds, std::function<void()> task) override {
    Post(std::move(task));
  }
  // Returns once every task posted so far (and what they posted) has run.
  void Drain() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return tasks_.empty() && !running_; });
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [this] { return stop_ || !tasks_.empty(); });
        if (stop_) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
        running_ = true;
      }
      task();
      {
        std::lock_guard<std::mutex> l(mu_);
        running_ = false;
      }
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  bool running_ = false;
  std::thread thread_;
};

constexpr uint64_t kPiB = 1ULL << 50;

// A warm job's progress as its listener hears it: tests wait for a condition
// on it (woken by each update) instead of polling the job. The listener runs
// on the job executor's thread: declare the waiter before that executor, so
// that it outlives the thread (ThreadSanitizer caught a test's end destroying
// the condition variable while the last update was still notifying it).
class ProgressWaiter {
 public:
  Warmer::UpdateFn Listener() {
    return [this](const WarmProgress& p) {
      {
        std::lock_guard<std::mutex> l(mu_);
        last_ = p;
      }
      cv_.notify_all();
    };
  }
  // True once `done(progress)` holds, false after `timeout`.
  bool WaitFor(const std::function<bool(const WarmProgress&)>& done,
               std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, timeout, [&] { return done(last_); });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  WarmProgress last_;
};

class BoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.AddFile("/d/small", "hello");
    base_.AddFile("/d/pib", "");
    base_.AddFile("/d/huge", "");
    base_.AddFile("/d/bad\nname", "x");
    base_.AddFile("/d/" + std::string(256, 'x'), "x");
    base_.AddFile("/d/" + std::string(255, 'y'), "y");
    origin_.SetSize("/d/pib", kPiB);
    origin_.SetSize("/d/huge", UINT64_MAX);
  }

  void Build(PrefetchOptions popts) {
    catalog_ = std::make_unique<CacheCatalog>(
        index_, store_, disk_, CatalogOptions{},
        [this](const BlockKey& k) { return reader_ && reader_->InUse(k); });
    ASSERT_TRUE(catalog_->Load().ok());
    names_ = std::make_unique<NamespaceCache>(origin_, index_, NamespaceOptions{});
    scheduler_ = std::make_unique<FetchScheduler>(SchedulerOptions{});
    reader_ = std::make_unique<BlockReader>(origin_, store_, disk_, BlockReaderOptions{1000},
                                            catalog_.get(), scheduler_.get());
    prefetcher_ = std::make_unique<Prefetcher>(
        *names_, *reader_, disk_, popts,
        [](const ObjectPath& p, const FileAttr& a) { return ObjectIdFor("fed", p, a); });
    FileSystemOptions fso;
    fso.op_timeout = std::chrono::milliseconds(2000);
    fso.federation_id = "fed";
    fs_ = std::make_unique<FileSystem>(*names_, *reader_, fso, prefetcher_.get());
  }

  FakeOrigin base_;
  HugeSizeOrigin origin_{base_};
  MemIndex index_;
  MemBlockStore store_;
  InlineExecutor disk_;
  std::unique_ptr<CacheCatalog> catalog_;
  std::unique_ptr<NamespaceCache> names_;
  std::unique_ptr<FetchScheduler> scheduler_;
  std::unique_ptr<BlockReader> reader_;
  std::unique_ptr<Prefetcher> prefetcher_;
  std::unique_ptr<FileSystem> fs_;
};

TEST(LimitsTest, NamesAndArithmetic) {
  EXPECT_TRUE(IsServableName("a.jpg"));
  EXPECT_TRUE(IsServableName(std::string(255, 'a')));
  EXPECT_TRUE(IsServableName("caf\xc3\xa9 100%"));
  // Any byte but '/' and NUL is a name's, as on a local disk (issue 28).
  for (std::string odd :
       {std::string("a\nb"), std::string("a\rb"), std::string("a\x7f"), std::string("\x1b[31m"),
        std::string("a\xff\xfe"), std::string("?lead"), std::string("trail ")}) {
    EXPECT_TRUE(IsServableName(odd)) << EscapeForLog(odd);
  }
  for (std::string bad : {std::string(), std::string("."), std::string(".."), std::string(256, 'a'),
                          std::string("a/b"), std::string("a\0b", 3)}) {
    EXPECT_FALSE(IsServableName(bad)) << EscapeForLog(bad);
  }
  EXPECT_EQ(SaturatingAdd(UINT64_MAX - 1, 5), UINT64_MAX);
  EXPECT_EQ(SaturatingAdd(2, 3), 5u);
  uint64_t out = 7;
  EXPECT_FALSE(CheckedAdd(UINT64_MAX, 1, &out));
  EXPECT_EQ(out, 7u);
  EXPECT_EQ(BlockCount(UINT64_MAX, 1000), UINT64_MAX / 1000 + 1);
  EXPECT_EQ(BlockCount(2000, 1000), 2u);
  EXPECT_EQ(BlockCount(0, 1000), 0u);
}

TEST(LimitsTest, EscapeForLogKeepsOneLine) {
  EXPECT_EQ(EscapeForLog("a\nb\r\t\\c\x1b[0m\xff"), "a\\nb\\r\\t\\\\c\\x1b[0m\\xff");
  EXPECT_EQ(EscapeForLog("plain /ns/x.bin"), "plain /ns/x.bin");
  EXPECT_EQ(EscapeForLog(std::string(2000, 'a'), 10), "aaaaaaaaaa...");
}

TEST_F(BoundsTest, ListingsKeepOnlyServableEntries) {
  Build(PrefetchOptions{});
  auto entries = names_->ReadDir(P("/d"), DeadlineAfter(std::chrono::seconds(5)));
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  std::vector<std::string> names;
  for (const DirEntry& e : *entries) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"bad\nname", "pib", "small", std::string(255, 'y')}));
  // Not in the (fresh) listing: unknown to the mount.
  EXPECT_EQ(names_->GetAttr(P("/d/huge"), DeadlineAfter(std::chrono::seconds(5))).status().code(),
            StatusCode::kNotFound);
  // Asked directly, a size beyond the limit is corrupt.
  MemIndex empty;
  NamespaceCache cold(origin_, empty, NamespaceOptions{});
  auto huge = cold.GetAttr(P("/d/huge"), DeadlineAfter(std::chrono::seconds(5)));
  EXPECT_EQ(huge.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(cold.GetAttr(P("/d/pib"), DeadlineAfter(std::chrono::seconds(5)))->size, kPiB);
}

TEST_F(BoundsTest, PrefetchOfAPetabyteFileIsCapped) {
  PrefetchOptions popts;
  popts.file_max_bytes = 5000;  // 5 blocks of 1000
  Build(popts);
  // Directory prefetch: the sibling's size puts the directory over dir_max_bytes.
  auto h = fs_->Open(P("/d/small"));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(*testing::ReadBytes(*fs_, *h, 0, 100), "hello");
  fs_->Release(*h);
  EXPECT_EQ(origin_.huge_reads, 0);
  // A hint names it: at most file_max_bytes of it are fetched ahead.
  prefetcher_->Hint("job", {P("/d/pib")});
  EXPECT_EQ(origin_.huge_reads, 5);
  EXPECT_EQ(prefetcher_->stats().hinted_files, 1u);
  // Sequential read-ahead near the end of a 1 PiB file neither wraps nor runs away.
  h = fs_->Open(P("/d/pib"));
  ASSERT_TRUE(h.ok());
  const int before = origin_.huge_reads;
  ASSERT_TRUE(testing::ReadBytes(*fs_, *h, kPiB - 2000, 1000).ok());
  ASSERT_TRUE(testing::ReadBytes(*fs_, *h, kPiB - 1000, 1000).ok());
  ASSERT_TRUE(testing::ReadBytes(*fs_, *h, kPiB - 1, UINT32_MAX).ok());
  EXPECT_LE(origin_.huge_reads - before, 3);
  fs_->Release(*h);
}

TEST_F(BoundsTest, WarmOfAPetabyteFileStopsAtItsFirstFailedBlock) {
  Build(PrefetchOptions{});
  origin_.FailReads(true);
  ProgressWaiter waiter;
  WorkerExecutor jobs;
  Warmer warmer(*fs_, *reader_, *catalog_, jobs, WarmerOptions{});
  auto job = warmer.Start({P("/d")}, true, waiter.Listener());
  ASSERT_TRUE(
      waiter.WaitFor([](const WarmProgress& p) { return p.finished; }, std::chrono::seconds(10)));
  ASSERT_TRUE(job->finished());
  WarmProgress p = job->Progress();
  EXPECT_EQ(p.files_total, 4u);  // bad\nname, pib, small, y...y
  EXPECT_EQ(p.files_failed, 1u);
  EXPECT_EQ(p.files_done, 3u);
  EXPECT_EQ(p.bytes_total, kPiB + 1 + 5 + 1);
  EXPECT_LE(origin_.huge_reads, 64);  // the blocks in flight when the first failed, no more
}

TEST_F(BoundsTest, WarmOfAPetabyteFileIsLazyAndCancelsPromptly) {
  Build(PrefetchOptions{});
  ProgressWaiter waiter;
  WorkerExecutor jobs;
  Warmer warmer(*fs_, *reader_, *catalog_, jobs, WarmerOptions{});
  auto job = warmer.Start({P("/d/pib")}, false, waiter.Listener());
  ASSERT_TRUE(waiter.WaitFor([](const WarmProgress& p) { return p.bytes_done >= 20000; },
                             std::chrono::seconds(10)));
  WarmProgress p = job->Progress();
  EXPECT_TRUE(p.listing_done);  // AddFile did not try to queue 2^40 blocks
  EXPECT_EQ(p.bytes_total, kPiB);
  EXPECT_GE(p.bytes_done, 20000u);
  EXPECT_FALSE(p.finished);
  const auto cancel_at = Clock::now();
  job->Cancel();
  ASSERT_TRUE(
      waiter.WaitFor([](const WarmProgress& p) { return p.finished; }, std::chrono::seconds(5)));
  ASSERT_TRUE(job->finished());
  EXPECT_LT(Clock::now() - cancel_at, std::chrono::seconds(1));
  const int reads = origin_.huge_reads;
  jobs.Drain();                          // every task the job had posted has run
  EXPECT_EQ(origin_.huge_reads, reads);  // nothing issued after the end
  EXPECT_TRUE(job->Progress().cancelled);
}

}  // namespace
}  // namespace perch::core
