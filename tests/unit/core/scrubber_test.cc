// The scrub (issue 30, item 5) over the in-memory fakes: a verify job checks
// every block under its path and only those, drops and reports the bad ones
// and nothing else (blocks evicted meanwhile are skipped, not bad), checks
// whole objects against a recorded digest; the background scrub finds a bad
// block without any read, at its rate, and resumes at its saved cursor; and a
// scrub racing writes, evictions and drops of the same blocks on other
// threads reports no corruption that is not there (ThreadSanitizer).
#include "daemon/core/scrubber.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "daemon/core/cache_catalog.h"
#include "tests/fakes/mem_block_store.h"
#include "tests/fakes/mem_index.h"

namespace perch::core {
namespace {

using testing::InlineExecutor;
using testing::MemBlockStore;
using testing::MemIndex;

using testing::kBlock;

// Runs posted tasks only when told, one at a time (a background scrub posts
// itself again forever).
class StepExecutor : public Executor {
 public:
  void Post(std::function<void()> task) override {
    std::lock_guard<std::mutex> l(mu_);
    tasks_.push_back(std::move(task));
  }
  void PostAfter(std::chrono::milliseconds delay, std::function<void()> task) override {
    delays.push_back(delay);
    Post(std::move(task));
  }
  bool RunOne() {
    std::function<void()> t;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (tasks_.empty()) return false;
      t = std::move(tasks_.front());
      tasks_.pop_front();
    }
    t();
    return true;
  }
  void RunUntil(const std::function<bool()>& done, int max = 10000) {
    for (int i = 0; i < max && !done() && RunOne(); ++i) {
    }
  }
  std::vector<std::chrono::milliseconds> delays;

 private:
  std::mutex mu_;
  std::deque<std::function<void()>> tasks_;
};

// A store that remembers which blocks were verified, in order.
class RecordingStore : public MemBlockStore {
 public:
  Result<uint64_t> Verify(const BlockKey& key) override {
    {
      std::lock_guard<std::mutex> l(mu);
      verified.push_back(key);
    }
    return MemBlockStore::Verify(key);
  }
  std::mutex mu;
  std::vector<BlockKey> verified;
};

// 32 hex digits, as ObjectIdFor makes them (ids sort as their strings).
std::string Id(int n) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%032x", n);
  return buf;
}

std::string Pattern(uint64_t n, int seed) {
  std::string s(n, '\0');
  for (uint64_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed * 7) & 0xff);
  return s;
}

class ScrubberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    catalog_ = std::make_unique<CacheCatalog>(index_, store_, disk_, CatalogOptions(), nullptr);
    ASSERT_TRUE(catalog_->Load().ok());
    catalog_->Reconcile();  // inline: done at once
  }

  // Caches object `n` at `path`, `size` bytes, in blocks of kBlock.
  void Cache(int n, const std::string& path, uint64_t size) {
    const ObjectPath p = *ObjectPath::Parse(path);
    for (uint64_t i = 0; i * kBlock < size; ++i) {
      const uint64_t len = std::min(kBlock, size - i * kBlock);
      const BlockKey key{Id(n), i};
      ASSERT_TRUE(store_.Write(key, Pattern(len, n)).ok());
      catalog_->Stored(key, len, p, ObjectVersion{size, "e"});
    }
  }

  std::unique_ptr<Scrubber> Make(uint64_t rate = 0, ObjectDigests* digests = nullptr) {
    ScrubOptions o;
    o.block_size = kBlock;
    o.rate_bytes_per_second = rate;
    o.page_blocks = 2;  // pages end inside objects
    o.page_objects = 2;
    o.job_step_bytes = 1500;
    o.cursor_every = std::chrono::milliseconds(0);
    return std::make_unique<Scrubber>(*catalog_, store_, index_, jobs_, o, digests);
  }

  // Runs verify of `prefix` to its end; its last progress.
  ScrubProgress VerifyAll(Scrubber& s, const std::string& prefix, int* updates = nullptr) {
    std::vector<ScrubProgress> seen;
    auto job = s.Verify(*ObjectPath::Parse(prefix), prefix,
                        [&](const ScrubProgress& p) { seen.push_back(p); });
    jobs_.RunUntil([&] { return job->finished(); });
    EXPECT_TRUE(job->finished());
    for (size_t i = 1; i < seen.size(); ++i)
      EXPECT_GE(seen[i].blocks_done, seen[i - 1].blocks_done);
    if (updates != nullptr) *updates = static_cast<int>(seen.size());
    EXPECT_FALSE(seen.empty());
    return seen.empty() ? ScrubProgress() : seen.back();
  }

  MemIndex index_;
  RecordingStore store_;
  InlineExecutor disk_;
  StepExecutor jobs_;
  std::unique_ptr<CacheCatalog> catalog_;
};

TEST_F(ScrubberTest, VerifyDropsAndReportsExactlyTheBadBlocksUnderItsPath) {
  Cache(1, "/a/x", 2500);  // 3 blocks
  Cache(2, "/a/y", 700);
  Cache(3, "/b/z", 900);
  Cache(4, "/ab", 900);  // a sibling whose name starts like /a
  store_.Corrupt(BlockKey{Id(1), 1});
  store_.Corrupt(BlockKey{Id(3), 0});
  ASSERT_TRUE(catalog_->Pin(*ObjectPath::Parse("/a/x")).ok());  // pinned blocks are checked too
  auto s = Make();
  int updates = 0;
  ScrubProgress p = VerifyAll(*s, "/a", &updates);
  EXPECT_TRUE(p.counted);
  EXPECT_EQ(p.blocks_total, 4u);
  EXPECT_EQ(p.bytes_total, 3200u);
  EXPECT_EQ(p.blocks_done, 4u);
  EXPECT_EQ(p.objects_done, 2u);
  EXPECT_EQ(p.corrupt_blocks, 1u);
  EXPECT_EQ(p.missing_blocks, 0u);
  EXPECT_EQ(p.corrupt, std::vector<std::string>{"/a/x (block 1)"});
  EXPECT_FALSE(p.cancelled);
  EXPECT_GT(updates, 2);  // streamed, a step at a time
  EXPECT_FALSE(catalog_->Contains(BlockKey{Id(1), 1}));
  EXPECT_FALSE(store_.Has(BlockKey{Id(1), 1}));
  EXPECT_TRUE(catalog_->Contains(BlockKey{Id(1), 0}));
  EXPECT_TRUE(catalog_->Contains(BlockKey{Id(1), 2}));
  // Outside the path: not looked at (still there, still bad).
  EXPECT_TRUE(store_.Has(BlockKey{Id(3), 0}));
  EXPECT_TRUE(catalog_->Contains(BlockKey{Id(3), 0}));
  for (const BlockKey& k : store_.verified)
    EXPECT_TRUE(k.object_id == Id(1) || k.object_id == Id(2));
  EXPECT_EQ(s->counters().corrupt_blocks.load(), 1u);
  EXPECT_EQ(s->counters().bytes.load(), 3200u);
  // Everything: the other bad block now.
  ScrubProgress all = VerifyAll(*s, "/");
  EXPECT_EQ(all.corrupt, std::vector<std::string>{"/b/z (block 0)"});
  EXPECT_EQ(s->counters().corrupt_blocks.load(), 2u);
  s->Stop();
}

TEST_F(ScrubberTest, BlocksGoneBeforeTheirTurnAreMissingNotBad) {
  Cache(1, "/a/x", 2500);
  auto s = Make();
  auto job = s->Verify(ObjectPath(), "/", nullptr);
  jobs_.RunOne();  // counted
  // Evicted from the store behind the catalog's back (as a race would).
  ASSERT_TRUE(store_.Remove(BlockKey{Id(1), 2}).ok());
  jobs_.RunUntil([&] { return job->finished(); });
  ScrubProgress p = job->Progress();
  EXPECT_EQ(p.missing_blocks, 1u);
  EXPECT_EQ(p.corrupt_blocks, 0u);
  EXPECT_TRUE(p.corrupt.empty());
  s->Stop();
}

TEST_F(ScrubberTest, CancelStopsAJob) {
  for (int i = 1; i <= 20; ++i) Cache(i, "/a/f" + std::to_string(i), 2000);
  auto s = Make();
  auto job = s->Verify(ObjectPath(), "/", nullptr);
  jobs_.RunOne();
  jobs_.RunOne();
  job->Cancel();
  jobs_.RunUntil([&] { return job->finished(); });
  EXPECT_TRUE(job->Progress().cancelled);
  EXPECT_LT(job->Progress().blocks_done, 40u);
  s->Stop();
}

// Digests: the fake knows objects 1 and 2 (2 with a wrong digest), not 3.
class FakeDigests : public ObjectDigests {
 public:
  class Check : public ObjectDigests::Check {
   public:
    Check(std::string want) : want_(std::move(want)) {}
    void Update(std::string_view b) override { got_ += b; }
    bool Matches() override { return got_ == want_; }
    std::string Describe() const override { return "fake=1"; }

   private:
    std::string want_, got_;
  };
  std::unique_ptr<ObjectDigests::Check> Start(const std::string& id, uint64_t size) override {
    started.insert(id);
    auto it = digests.find(id);
    if (it == digests.end()) return nullptr;
    EXPECT_EQ(size, it->second.size());
    return std::make_unique<Check>(it->second);
  }
  DigestVerdict Verdict(const std::string& id) const override {
    auto it = verdicts.find(id);
    return it == verdicts.end() ? DigestVerdict{} : it->second;
  }
  void Mismatched(const std::string& id, std::string what) override {
    verdicts[id] = {DigestVerdict::kMismatched, std::move(what)};
  }
  std::map<std::string, std::string> digests;  // id -> the whole object's bytes
  std::map<std::string, DigestVerdict> verdicts;
  std::set<std::string> started;
};

TEST_F(ScrubberTest, WholeObjectsAreCheckedAgainstARecordedDigest) {
  Cache(1, "/d/good", 2500);
  Cache(2, "/d/wrong", 1500);
  Cache(3, "/d/none", 800);
  Cache(4, "/d/badblock", 1200);
  store_.Corrupt(BlockKey{Id(4), 1});
  FakeDigests digests;
  digests.digests[Id(1)] = Pattern(1000, 1) + Pattern(1000, 1) + Pattern(500, 1);
  digests.digests[Id(2)] = std::string(1500, 'x');  // not what is cached
  digests.digests[Id(4)] = Pattern(1000, 4) + Pattern(200, 4);
  auto s = Make(0, &digests);
  ScrubProgress p = VerifyAll(*s, "/d");
  EXPECT_EQ(p.digests_verified, 1u);
  EXPECT_EQ(p.digest_mismatches, 1u);
  EXPECT_EQ(p.corrupt_blocks, 1u);
  // Progress stays within the total (issue 44: a digest's second read of
  // an object counted as progress made 20 MiB "done" of 10 MiB).
  EXPECT_EQ(p.bytes_done, p.bytes_total);
  EXPECT_EQ(p.blocks_done, p.blocks_total);
  EXPECT_EQ(p.digest_bytes, 2500u + 1500u);
  std::vector<std::string> want = {"/d/wrong (digest)", "/d/badblock (block 1)"};
  std::sort(want.begin(), want.end());
  std::vector<std::string> got = p.corrupt;
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  // The mismatching object is gone whole; the good one stays.
  EXPECT_FALSE(catalog_->Contains(BlockKey{Id(2), 0}));
  EXPECT_FALSE(catalog_->Contains(BlockKey{Id(2), 1}));
  EXPECT_FALSE(store_.Has(BlockKey{Id(2), 0}));
  EXPECT_TRUE(catalog_->Contains(BlockKey{Id(1), 2}));
  // An object with a bad block is not digest-checked (it is incomplete now).
  EXPECT_FALSE(digests.started.count(Id(4)));
  EXPECT_TRUE(digests.started.count(Id(3)));  // asked, none recorded: nothing done
  EXPECT_EQ(s->counters().digest_mismatches.load(), 1u);
  EXPECT_EQ(s->counters().digests_verified.load(), 1u);
  // The mismatch is told to the keeper of digests (the xattr says it).
  EXPECT_EQ(digests.Verdict(Id(2)).kind, DigestVerdict::kMismatched);
  s->Stop();
}

// `perchctl verify` says per file what it found: verified (with the digest),
// mismatched (a bad block, or a digest not matched), unverified (held in
// part, or no digest known, and why).
TEST_F(ScrubberTest, VerifySaysPerFileVerifiedUnverifiedOrMismatched) {
  Cache(1, "/v/good", 2500);
  Cache(2, "/v/wrong", 1500);
  Cache(3, "/v/none", 800);
  Cache(4, "/v/badblock", 1200);
  Cache(5, "/v/part", 2500);
  Cache(6, "/v/told", 900);
  store_.Corrupt(BlockKey{Id(4), 1});
  ASSERT_TRUE(store_.Remove(BlockKey{Id(5), 1}).ok());
  FakeDigests digests;
  digests.digests[Id(1)] = Pattern(1000, 1) + Pattern(1000, 1) + Pattern(500, 1);
  digests.digests[Id(2)] = std::string(1500, 'x');
  digests.verdicts[Id(6)] = {DigestVerdict::kUnverified, "no server states a digest"};
  auto s = Make(0, &digests);
  ScrubProgress p = VerifyAll(*s, "/v");
  std::map<std::string, DigestVerdict> by_path;
  for (const FileVerdict& f : p.files) by_path[f.path] = f.verdict;
  ASSERT_EQ(by_path.size(), 6u) << "one verdict per file";
  EXPECT_EQ(by_path["/v/good"].kind, DigestVerdict::kVerified);
  EXPECT_EQ(by_path["/v/good"].detail, "fake=1");
  EXPECT_EQ(by_path["/v/wrong"].kind, DigestVerdict::kMismatched);
  EXPECT_NE(by_path["/v/wrong"].detail.find("fake=1"), std::string::npos);
  EXPECT_EQ(by_path["/v/badblock"].kind, DigestVerdict::kMismatched);
  EXPECT_NE(by_path["/v/badblock"].detail.find("block 1"), std::string::npos);
  EXPECT_EQ(by_path["/v/part"].kind, DigestVerdict::kUnverified);
  EXPECT_NE(by_path["/v/part"].detail.find("held in part"), std::string::npos);
  EXPECT_EQ(by_path["/v/none"].kind, DigestVerdict::kUnverified);
  EXPECT_EQ(by_path["/v/told"].kind, DigestVerdict::kUnverified);
  EXPECT_EQ(by_path["/v/told"].detail, "no server states a digest");
  EXPECT_EQ(p.objects_unverified, 3u);
  EXPECT_EQ(p.files_not_listed, 0u);
  s->Stop();
}

TEST_F(ScrubberTest, BackgroundScrubFindsABadBlockWithoutAReadAtItsRate) {
  Cache(1, "/a/x", 3000);
  Cache(2, "/a/y", 3000);
  store_.Corrupt(BlockKey{Id(2), 1});
  auto s = Make(/*rate=*/4000);  // 1000 bytes per step, then a quarter second
  s->Start();
  jobs_.RunUntil([&] { return s->counters().passes.load() > 0; });
  EXPECT_EQ(s->counters().corrupt_blocks.load(), 1u);
  EXPECT_FALSE(catalog_->Contains(BlockKey{Id(2), 1}));
  EXPECT_EQ(store_.reads.load(), 0);  // found by Verify, not by a read
  // Paced: each step of 1000 bytes is followed by a pause of 250 ms.
  ASSERT_GE(jobs_.delays.size(), 2u);
  EXPECT_EQ(jobs_.delays[0], std::chrono::milliseconds(0));  // start_delay
  EXPECT_EQ(jobs_.delays[1], std::chrono::milliseconds(250));
  s->Stop();
}

TEST_F(ScrubberTest, BackgroundScrubResumesAtItsSavedCursor) {
  for (int i = 1; i <= 6; ++i) Cache(i, "/r/f" + std::to_string(i), 1000);
  {
    auto s = Make(/*rate=*/1000);
    s->Start();
    jobs_.RunUntil([&] { return store_.verified.size() >= 3; });
    s->Stop();  // saves the cursor
  }
  auto saved = index_.Get(Scrubber::kCursorKey);
  ASSERT_TRUE(saved.ok() && saved->has_value());
  store_.verified.clear();
  // A new scrubber (a restart) goes on at the fourth object, not the first.
  auto s = Make(/*rate=*/1000);
  s->Start();
  jobs_.RunUntil([&] { return !store_.verified.empty(); });
  ASSERT_FALSE(store_.verified.empty());
  EXPECT_EQ(store_.verified.front().object_id, Id(4));
  jobs_.RunUntil([&] { return s->counters().passes.load() > 0; });
  // That pass ended at the last object; the next begins at the first again.
  jobs_.RunUntil([&] { return s->counters().passes.load() > 1; });
  EXPECT_EQ(s->counters().passes.load(), 2u);
  s->Stop();
}

// Scrub steps on one thread while others store, evict and read the same
// blocks: a block may vanish under the scrub, but none is called bad.
TEST_F(ScrubberTest, RacingWritesEvictionsAndReadsAreNeverCorruptions) {
  for (int i = 1; i <= 8; ++i) Cache(i, "/t/f" + std::to_string(i), 2500);
  auto s = Make();
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    int round = 0;
    while (!stop) {
      const int n = 1 + round++ % 8;
      for (uint64_t b = 0; b < 3; ++b) {
        const BlockKey key{Id(n), b};
        const uint64_t len = b < 2 ? kBlock : 500;
        (void)store_.Remove(key);
        catalog_->Dropped(key);
        (void)store_.Write(key, Pattern(len, n));
        catalog_->Stored(key, len, *ObjectPath::Parse("/t/f" + std::to_string(n)),
                         ObjectVersion{2500, "e"});
        (void)store_.Read(key, 0, 10);
      }
    }
  });
  uint64_t checked = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (std::chrono::steady_clock::now() < end) {
    ScrubProgress p = VerifyAll(*s, "/");
    EXPECT_EQ(p.corrupt_blocks, 0u);
    checked += p.blocks_done;
  }
  stop = true;
  churn.join();
  EXPECT_GT(checked, 0u);
  s->Stop();
}

}  // namespace
}  // namespace perch::core
