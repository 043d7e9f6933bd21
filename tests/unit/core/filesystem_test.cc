// core::FileSystem over fakes, without FUSE: metadata from the namespace
// cache (persisted, negative entries, stale when offline), reads through the
// block cache, eviction under a quota, open files protected from eviction.
#include "daemon/core/filesystem.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "daemon/core/cache_catalog.h"
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

// One node's cache stack over a FakeOrigin; Restart() rebuilds everything but
// the index and the block store, as a daemon restart does.
class FileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.AddFile("/d/a.bin", Data(2500, 1));
    origin_.AddFile("/d/b.bin", Data(900, 2));
    origin_.AddFile("/d/sub/c.txt", "hello");
    origin_.AddDir("/empty");
    Build(CatalogOptions{});
  }

  // (Re)builds the stack over the same index and store, as a restart does.
  void Build(CatalogOptions copts) {
    StackConfig config;
    config.catalog = copts;
    config.names = ns_opts_;
    ASSERT_TRUE(node_.Build(config).ok());
    catalog_ = &node_.stack().catalog();
    reader_ = &node_.mount().reader();
    fs_ = &node_.mount().fs();
  }

  std::string ReadAll(const std::string& path) {
    auto h = fs_->Open(P(path));
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return {};
    auto r = testing::ReadBytes(*fs_, *h, 0, 1 << 20);
    fs_->Release(*h);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::string();
  }

  StackFixture node_;
  FakeOrigin& origin_ = node_.origin;
  MemBlockStore& store_ = node_.store;
  MemIndex& index_ = node_.index;
  InlineExecutor& disk_ = node_.disk;
  NamespaceOptions ns_opts_;
  std::set<BlockKey> pinned_;  // blocks the test declares in use
  CacheCatalog* catalog_ = nullptr;
  BlockReader* reader_ = nullptr;
  FileSystem* fs_ = nullptr;
};

TEST_F(FileSystemTest, MetadataComesFromOneListing) {
  auto ls = fs_->ReadDir(P("/d"));
  ASSERT_TRUE(ls.ok());
  ASSERT_EQ(ls->size(), 3u);
  EXPECT_EQ((*ls)[0].name, "a.bin");
  EXPECT_TRUE((*ls)[2].attr.is_dir);
  int stats_before = origin_.stats.load();
  auto a = fs_->Lookup(P("/d"), "a.bin");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size, 2500u);
  EXPECT_EQ(origin_.stats.load(), stats_before);  // answered from the listing
  auto missing = fs_->Lookup(P("/d"), "zzz");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(origin_.stats.load(), stats_before);  // negative from the listing
  EXPECT_TRUE(fs_->ReadDir(P("/empty"))->empty());
  EXPECT_EQ(fs_->ReadDir(P("/d/a.bin")).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FileSystemTest, NegativeEntriesAreRemembered) {
  EXPECT_EQ(fs_->GetAttr(P("/nope")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(fs_->GetAttr(P("/nope")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(origin_.stats.load(), 1);
}

TEST_F(FileSystemTest, ReadsAreByteExactAndSecondReadHits) {
  EXPECT_EQ(ReadAll("/d/a.bin"), Data(2500, 1));
  EXPECT_EQ(reader_->stats().misses.load(), 3u);
  EXPECT_EQ(ReadAll("/d/a.bin"), Data(2500, 1));
  EXPECT_EQ(reader_->stats().hits.load(), 3u);
  EXPECT_EQ(catalog_->cached_bytes(), 2500u);
  auto h = fs_->Open(P("/d/a.bin"));
  auto mid = testing::ReadBytes(*fs_, *h, 999, 2);
  ASSERT_TRUE(mid.ok());
  EXPECT_EQ(*mid, Data(2500, 1).substr(999, 2));
  auto eof = testing::ReadBytes(*fs_, *h, 2500, 10);
  ASSERT_TRUE(eof.ok());
  EXPECT_TRUE(eof->empty());
  fs_->Release(*h);
  EXPECT_EQ(fs_->Open(P("/d")).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FileSystemTest, RestartWithOriginDownServesWhatIsCached) {
  // Everything the namespace cache stores is already expired: after the
  // restart only stale-if-error can answer.
  ns_opts_.file_ttl = ns_opts_.dir_ttl = ns_opts_.negative_ttl = std::chrono::seconds(-1);
  Build(CatalogOptions{});
  ASSERT_EQ(ReadAll("/d/a.bin"), Data(2500, 1));
  ASSERT_TRUE(fs_->ReadDir(P("/d")).ok());
  ASSERT_TRUE(catalog_->Flush().ok());
  // Restart with everything expired and the federation gone.
  origin_.FailWith(UnavailableError("federation down"));
  Build(CatalogOptions{});
  EXPECT_EQ(catalog_->cached_bytes(), 2500u);  // loaded from the index
  EXPECT_EQ(ReadAll("/d/a.bin"), Data(2500, 1));
  EXPECT_TRUE(fs_->offline());
  auto ls = fs_->ReadDir(P("/d"));
  ASSERT_TRUE(ls.ok());
  EXPECT_EQ(ls->size(), 3u);
  // Not cached: a clear error, not a hang.
  auto h = fs_->Open(P("/d/b.bin"));
  ASSERT_TRUE(h.ok());
  auto r = testing::ReadBytes(*fs_, *h, 0, 100);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  fs_->Release(*h);
  EXPECT_EQ(fs_->GetAttr(P("/never-seen")).status().code(), StatusCode::kUnavailable);
}

TEST_F(FileSystemTest, QuotaEvictsLeastRecentlyUsedBlocks) {
  Build(CatalogOptions{2000, 0.95, 0.5, 1, nullptr, nullptr, nullptr});
  // a.bin alone (2500 bytes) is larger than the quota: it still reads whole.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ReadAll("/d/a.bin"), Data(2500, 1));
    EXPECT_EQ(ReadAll("/d/b.bin"), Data(900, 2));
    EXPECT_EQ(ReadAll("/d/sub/c.txt"), "hello");
    EXPECT_LE(catalog_->cached_bytes(), 2000u);
  }
  EXPECT_GT(catalog_->evictions(), 0u);
  // The most recently used block survived; the oldest went.
  EXPECT_TRUE(
      store_.Has(BlockKey{fs_->ObjectId(P("/d/sub/c.txt"), *fs_->GetAttr(P("/d/sub/c.txt"))), 0}));
}

TEST_F(FileSystemTest, BlocksInUseAreNotEvicted) {
  ASSERT_EQ(ReadAll("/d/a.bin"), Data(2500, 1));  // 3 blocks, LRU order 0, 1, 2
  std::string id = fs_->ObjectId(P("/d/a.bin"), *fs_->GetAttr(P("/d/a.bin")));
  pinned_.insert(BlockKey{id, 0});
  CacheCatalog small(index_, store_, disk_,
                     CatalogOptions{1000, 0.5, 0.4, 1, nullptr, nullptr, nullptr},
                     [this](const BlockKey& k) { return pinned_.count(k) > 0; });
  ASSERT_TRUE(small.Load().ok());        // over the high watermark: evicts at once
  EXPECT_EQ(small.evictions(), 2u);      // blocks 1 and 2; block 0 is in use
  EXPECT_EQ(small.EvictIfNeeded(), 0u);  // nothing else may go
  EXPECT_TRUE(store_.Has(BlockKey{id, 0}));
  EXPECT_FALSE(store_.Has(BlockKey{id, 1}));
}

// Read's pieces (or the error), from a read the fakes answer on the
// caller's thread.
Result<std::vector<ReadPiece>> Pieces(FileSystem& fs, const FileRef& file, uint64_t offset,
                                      uint64_t size) {
  std::optional<Result<std::vector<ReadPiece>>> got;
  fs.Read(file, offset, size, [&](Result<std::vector<ReadPiece>> r) { got.emplace(std::move(r)); });
  EXPECT_TRUE(got.has_value());  // the fakes answer on the caller's thread
  if (!got) return InternalError("no answer");
  return *std::move(got);
}

TEST_F(FileSystemTest, AReadSharesTheBlocksItFetches) {
  auto h = fs_->Open(P("/d/a.bin"));
  ASSERT_TRUE(h.ok());
  auto parts = Pieces(*fs_, FileRef::Handle(*h), 900, 1200);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  // Blocks of 1000 bytes: bytes 900-2099 are parts of blocks 0, 1 and 2,
  // each a view of the whole fetched block, not a copy of the range.
  ASSERT_EQ(parts->size(), 3u);
  ASSERT_NE((*parts)[0].bytes(), nullptr);
  EXPECT_EQ((*parts)[0].bytes()->bytes->size(), 1000u);
  EXPECT_EQ((*parts)[0].bytes()->offset, 900u);
  EXPECT_EQ((*parts)[0].length(), 100u);
  EXPECT_EQ((*parts)[1].length(), 1000u);
  EXPECT_EQ((*parts)[2].bytes()->offset, 0u);
  EXPECT_EQ((*parts)[2].length(), 100u);
  EXPECT_EQ(*testing::Joined(*parts), Data(2500, 1).substr(900, 1200));
  EXPECT_EQ(reader_->stats().misses.load(), 3u);
  // Hits (and a read by path) read the same; past the end is empty.
  EXPECT_EQ(*testing::ReadBytes(*fs_, FileRef::Path(P("/d/a.bin")), 0, 4096), Data(2500, 1));
  EXPECT_EQ(reader_->stats().misses.load(), 3u);
  auto past = Pieces(*fs_, FileRef::Handle(*h), 2500, 10);
  ASSERT_TRUE(past.ok());
  EXPECT_TRUE(past->empty());
  fs_->Release(*h);
  EXPECT_EQ(Pieces(*fs_, FileRef::Handle(*h), 0, 10).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(FileSystemTest, HitsInFilesAreSlicesOfThem) {
  store_.SetSlices(true);  // as FileBlockStore: every block in a file
  EXPECT_EQ(ReadAll("/d/a.bin"), Data(2500, 1));
  auto parts = Pieces(*fs_, FileRef::Path(P("/d/a.bin")), 900, 1200);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 3u);
  for (const ReadPiece& p : *parts) EXPECT_NE(p.slice(), nullptr);
  EXPECT_EQ((*parts)[0].slice()->file_offset(), 900u);
  EXPECT_EQ((*parts)[0].length(), 100u);
  EXPECT_EQ((*parts)[2].length(), 100u);
  EXPECT_EQ(*testing::Joined(*parts), Data(2500, 1).substr(900, 1200));
  EXPECT_EQ(reader_->stats().misses.load(), 3u);
}

// Issue 32: a read of which only some blocks were cached sliced the cached
// ones, found one missing, and then read them all again (TrySlice, then
// ReadParts). Each block is asked of the store once.
TEST_F(FileSystemTest, APartialHitAsksTheStoreForEachBlockOnce) {
  store_.SetSlices(true);
  auto h = fs_->Open(P("/d/a.bin"));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(testing::ReadBytes(*fs_, *h, 0, 1000).ok());  // block 0 cached
  store_.reads = 0;
  store_.slices = 0;
  auto parts = Pieces(*fs_, FileRef::Handle(*h), 500, 1000);  // block 0 hit, block 1 miss
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_NE((*parts)[0].slice(), nullptr);  // the hit, from its file
  EXPECT_NE((*parts)[1].bytes(), nullptr);  // the fetched block
  EXPECT_EQ(*testing::Joined(*parts), Data(2500, 1).substr(500, 1000));
  // Block 1 the catalog knows is absent: no probe of it.
  EXPECT_EQ(store_.reads.load() + store_.slices.load(), 1)
      << "reads " << store_.reads.load() << ", slices " << store_.slices.load();
  EXPECT_EQ(reader_->stats().hits.load(), 1u);
  fs_->Release(*h);
}

TEST_F(FileSystemTest, AReadRemembersAFailure) {
  auto h = fs_->Open(P("/d/b.bin"));
  ASSERT_TRUE(h.ok());
  origin_.FailWith(UnavailableError("cache down", FailureSite::kCache));
  EXPECT_EQ(Pieces(*fs_, FileRef::Handle(*h), 0, 100).status().code(), StatusCode::kUnavailable);
  const int fetches = origin_.reads.load();
  // The next request of the same read(2) fails at once, without a fetch.
  EXPECT_EQ(Pieces(*fs_, FileRef::Handle(*h), 100, 100).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(origin_.reads.load(), fetches);
  origin_.FailWith(Status::Ok());
  fs_->Release(*h);
}

// What is cached is served while a failure is remembered: only reads that
// must fetch fail at once (the zero-copy path never asked).
TEST_F(FileSystemTest, ARememberedFailureStopsOnlyFetches) {
  store_.SetSlices(true);
  auto h = fs_->Open(P("/d/a.bin"));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(testing::ReadBytes(*fs_, *h, 0, 1000).ok());  // block 0 cached
  origin_.FailWith(UnavailableError("cache down", FailureSite::kCache));
  EXPECT_EQ(Pieces(*fs_, FileRef::Handle(*h), 1000, 100).status().code(), StatusCode::kUnavailable);
  const int fetches = origin_.reads.load();
  EXPECT_EQ(*testing::ReadBytes(*fs_, *h, 0, 1000), Data(2500, 1).substr(0, 1000));
  // A hit does not clear the failure: the next fetch still fails at once.
  EXPECT_EQ(Pieces(*fs_, FileRef::Handle(*h), 500, 1000).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(origin_.reads.load(), fetches);
  origin_.FailWith(Status::Ok());
  fs_->Release(*h);
}

TEST_F(FileSystemTest, DeadlineBoundsEveryCall) {
  origin_.Hold(true);
  auto start = std::chrono::steady_clock::now();
  auto r = fs_->GetAttr(P("/d/a.bin"));
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  origin_.Hold(false);
  origin_.Release();
}

TEST_F(FileSystemTest, OneSystemCallWaitsForAnUnreachableFederationOnlyOnce) {
  auto h = fs_->Open(P("/d/a.bin"));
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  // The federation takes every request and answers none until the read's
  // deadline, where the federation client gives up (kDeadlineExceeded).
  origin_.FailWith(DeadlineExceededError("no answer in time"));
  origin_.Hold(true);
  auto start = Clock::now();
  std::thread federation([&] {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(2000));  // op_timeout
    origin_.Hold(false);
    origin_.Release();
  });
  auto first = testing::ReadBytes(*fs_, *h, 0, 1000);
  federation.join();
  EXPECT_EQ(first.status().code(), StatusCode::kDeadlineExceeded) << first.status().ToString();
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(1900));
  // The kernel's next request of the same read(2) is answered at once.
  start = Clock::now();
  auto second = testing::ReadBytes(*fs_, *h, 1000, 1000);
  EXPECT_EQ(second.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(200));
  origin_.FailWith(Status::Ok());
  fs_->Release(*h);
}

// Issue #30 item 4: a file whose answers carry a freshness lifetime
// (Cache-Control max-age=2) is revalidated before it is served once that
// lifetime ran out, cache hits included; a file without one never is.
TEST_F(FileSystemTest, AFileWithAFreshnessLifetimeIsRevalidatedBeforeItIsServed) {
  using std::chrono::milliseconds;
  origin_.MaxAge(2);
  origin_.AddFile("/d/m.bin", Data(2500, 3), 1700000000);  // stays
  origin_.AddFile("/d/r.bin", Data(2500, 4), 1700000000);  // is replaced
  auto m = fs_->Open(P("/d/m.bin"));
  auto r = fs_->Open(P("/d/r.bin"));
  ASSERT_TRUE(m.ok() && r.ok());
  EXPECT_EQ(fs_->MaxAge(*m), 2);
  EXPECT_EQ(*testing::ReadBytes(*fs_, *m, 0, 4096), Data(2500, 3));
  EXPECT_EQ(*testing::ReadBytes(*fs_, *r, 0, 4096), Data(2500, 4));
  EXPECT_EQ(*testing::ReadBytes(*fs_, FileRef::Path(P("/d/m.bin")), 0, 4096), Data(2500, 3));
  EXPECT_EQ(*testing::ReadBytes(*fs_, FileRef::Path(P("/d/r.bin")), 0, 4096), Data(2500, 4));
  const int stats = origin_.stats.load();
  EXPECT_EQ(*testing::ReadBytes(*fs_, *m, 0, 10),
            Data(2500, 3).substr(0, 10));  // within it: a plain hit
  EXPECT_EQ(origin_.stats.load(), stats);

  // r.bin replaced at the origin (the same size, a later mtime), all cached.
  origin_.AddFile("/d/r.bin", Data(2500, 5), 1700000100);
  std::this_thread::sleep_for(milliseconds(2050));
  // m.bin, unchanged: asked once, served from the cache.
  const uint64_t misses = reader_->stats().misses.load();
  EXPECT_EQ(*testing::ReadBytes(*fs_, *m, 0, 4096), Data(2500, 3));
  EXPECT_EQ(*testing::ReadBytes(*fs_, FileRef::Path(P("/d/m.bin")), 0, 4096), Data(2500, 3));
  EXPECT_EQ(origin_.stats.load(), stats + 1);
  EXPECT_EQ(reader_->stats().misses.load(), misses);
  // r.bin: the held reader's version is gone: kStale, never the cached old bytes.
  EXPECT_EQ(testing::ReadBytes(*fs_, *r, 0, 10).status().code(), StatusCode::kStale);
  // A stat sees the new version and closes the path reads' handle of the old:
  // they then read the new one, with no error.
  ASSERT_TRUE(fs_->GetAttr(P("/d/r.bin")).ok());
  EXPECT_EQ(fs_->GetAttr(P("/d/r.bin"))->mtime, 1700000100);
  EXPECT_EQ(*testing::ReadBytes(*fs_, FileRef::Path(P("/d/r.bin")), 0, 4096), Data(2500, 5));
  EXPECT_EQ(ReadAll("/d/r.bin"), Data(2500, 5));  // and so does a new open
  fs_->Release(*m);
  fs_->Release(*r);
  EXPECT_EQ(node_.mount().names().revalidations(), 2u);
  EXPECT_EQ(node_.mount().names().revalidated_changes(), 1u);

  // A path read past the lifetime with no stat before it: kStale once (the
  // kernel may hold pages of the old version), then the new version.
  origin_.AddFile("/d/r.bin", Data(2500, 6), 1700000200);
  std::this_thread::sleep_for(milliseconds(2050));
  EXPECT_EQ(testing::ReadBytes(*fs_, FileRef::Path(P("/d/r.bin")), 0, 4096).status().code(),
            StatusCode::kStale);
  EXPECT_EQ(*testing::ReadBytes(*fs_, FileRef::Path(P("/d/r.bin")), 0, 4096), Data(2500, 6));
}

TEST_F(FileSystemTest, AFileWithoutAFreshnessLifetimeIsNeverAskedAboutOnHits) {
  auto h = fs_->Open(P("/d/a.bin"));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(fs_->MaxAge(*h), -1);
  EXPECT_EQ(*testing::ReadBytes(*fs_, *h, 0, 4096), Data(2500, 1));
  const int stats = origin_.stats.load();
  origin_.AddFile("/d/a.bin", Data(2500, 9), 1700000100);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(*testing::ReadBytes(*fs_, *h, 0, 4096), Data(2500, 1));  // its version, from the cache
  EXPECT_EQ(fs_->GetAttr(P("/d/a.bin"))->mtime, 1700000000);
  EXPECT_EQ(origin_.stats.load(), stats);
  EXPECT_EQ(node_.mount().names().revalidations(), 0u);
  fs_->Release(*h);
}

}  // namespace
}  // namespace perch::core
