// CacheCatalog hardening (issue #11): the start-up walk that adopts block
// files without a record and drops records without a file, the quota capped
// to what the filesystem holds when a write finds the disk full, and hit
// accounting by the bytes a reader got.
#include "daemon/core/cache_catalog.h"

#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "daemon/core/block_reader.h"
#include "tests/fakes/fake_origin.h"
#include "tests/fakes/mem_block_store.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/stack_fixture.h"

namespace perch::core {
namespace {

using testing::FakeOrigin;
using testing::InlineExecutor;
using testing::MemBlockStore;
using testing::MemIndex;
using testing::QueuedExecutor;

constexpr uint64_t kMiB = 1 << 20;

std::string Data(size_t n, unsigned seed = 5) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

const ObjectPath kPath = *ObjectPath::Parse("/ns/f");
const ObjectVersion kVersion{3000, "e1"};

TEST(CacheCatalogTest, ReconcileAdoptsOrphansAndDropsRecordsWithoutFiles) {
  MemIndex index;
  MemBlockStore store;
  InlineExecutor disk;
  {
    CacheCatalog first(index, store, disk, CatalogOptions{}, nullptr);
    ASSERT_TRUE(first.Load().ok());
    for (uint64_t b = 0; b < 3; ++b) {
      ASSERT_TRUE(store.Write(BlockKey{"obj", b}, std::string(1000, 'x')).ok());
      first.Stored(BlockKey{"obj", b}, 1000, kPath, kVersion);
    }
  }
  // A crash between rename and record (an orphan of 700 bytes), and one
  // inside an eviction (block 1's file gone, its record kept).
  ASSERT_TRUE(store.Write(BlockKey{"orphan", 0}, std::string(700, 'y')).ok());
  ASSERT_TRUE(store.Remove(BlockKey{"obj", 1}).ok());

  CacheCatalog catalog(index, store, disk, CatalogOptions{}, nullptr);
  ASSERT_TRUE(catalog.Load().ok());
  EXPECT_EQ(catalog.cached_bytes(), 3000u);  // what the index says, before the walk
  EXPECT_FALSE(catalog.reconciled());
  catalog.Reconcile();
  ASSERT_TRUE(catalog.reconciled());
  EXPECT_EQ(catalog.cached_bytes(), 2700u);  // == what the store holds
  EXPECT_EQ(catalog.cached_bytes(), store.UsedBytes());
  EXPECT_TRUE(catalog.Contains(BlockKey{"orphan", 0}));
  EXPECT_FALSE(catalog.Contains(BlockKey{"obj", 1}));
  EXPECT_EQ(catalog.CachedBytes("obj"), 2000u);
  // Persisted: a third start agrees without walking.
  CacheCatalog third(index, store, disk, CatalogOptions{}, nullptr);
  ASSERT_TRUE(third.Load().ok());
  EXPECT_EQ(third.cached_bytes(), 2700u);
  EXPECT_EQ(index.CountPrefix("b/"), 3u);
}

// Issue 14: a cold read goes straight to the fetch once the catalog is
// authoritative (after the start-up walk), instead of probing the store for
// a file that cannot be there; before the walk an orphan is still a hit.
TEST(CacheCatalogTest, ReadsProbeTheStoreOnlyForBlocksTheCatalogMayHold) {
  MemIndex index;
  MemBlockStore store;
  InlineExecutor disk;
  FakeOrigin origin;
  const std::string data = Data(1500);
  origin.AddFile("/ns/f", data);
  const ObjectVersion version{data.size(), ""};
  ASSERT_TRUE(store.Write(BlockKey{"orphan", 0}, data.substr(0, 1000)).ok());
  CacheCatalog catalog(index, store, disk, CatalogOptions{}, nullptr);
  ASSERT_TRUE(catalog.Load().ok());
  BlockReader reader(origin, store, disk, BlockReaderOptions{1000}, &catalog);
  auto read = [&](const std::string& id, uint64_t off, uint64_t len) {
    std::optional<Result<Bytes>> out;
    reader.Read(kPath, version, id, ByteRange{off, len}, DeadlineAfter(std::chrono::seconds(5)),
                [&](Result<Bytes> r) { out = std::move(r); });
    return out ? *std::move(out) : Result<Bytes>(InternalError("no answer"));
  };

  // Before the walk: an orphan file (no record) is looked for, and found.
  EXPECT_TRUE(catalog.MayContain(BlockKey{"unknown", 0}));
  auto orphan = read("orphan", 100, 200);
  ASSERT_TRUE(orphan.ok()) << orphan.status().ToString();
  EXPECT_EQ(*orphan, data.substr(100, 200));
  EXPECT_EQ(origin.reads.load(), 0);
  EXPECT_EQ(store.reads.load(), 1);

  catalog.Reconcile();
  ASSERT_TRUE(catalog.reconciled());
  EXPECT_FALSE(catalog.MayContain(BlockKey{"obj", 0}));
  EXPECT_TRUE(catalog.MayContain(BlockKey{"orphan", 0}));  // adopted
  // A cold read: no store probe, one fetch per block; then both are hits.
  auto cold = read("obj", 900, 200);
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  EXPECT_EQ(*cold, data.substr(900, 200));
  EXPECT_EQ(store.reads.load(), 1);
  EXPECT_EQ(origin.reads.load(), 2);
  EXPECT_TRUE(catalog.Contains(BlockKey{"obj", 0}) && catalog.Contains(BlockKey{"obj", 1}));
  auto warm = read("obj", 0, 1500);
  ASSERT_TRUE(warm.ok());
  EXPECT_EQ(*warm, data);
  EXPECT_EQ(store.reads.load(), 3);
  EXPECT_EQ(origin.reads.load(), 2);
  // A block whose record is dropped is fetched again, not probed.
  catalog.Dropped(BlockKey{"obj", 1});
  EXPECT_FALSE(catalog.MayContain(BlockKey{"obj", 1}));
  ASSERT_TRUE(read("obj", 1200, 10).ok());
  EXPECT_EQ(store.reads.load(), 3);
  EXPECT_EQ(origin.reads.load(), 3);
}

TEST(CacheCatalogTest, AnEmptyIndexIsRebuiltFromTheStoreAndAdoptedBlocksGoFirst) {
  MemIndex index;  // the old one was lost to corruption
  MemBlockStore store;
  InlineExecutor disk;
  for (uint64_t b = 0; b < 4; ++b)
    ASSERT_TRUE(store.Write(BlockKey{"old", b}, std::string(1000, 'o')).ok());
  CacheCatalog catalog(index, store, disk, CatalogOptions{6000, 0.95, 0.5, 1, nullptr}, nullptr);
  ASSERT_TRUE(catalog.Load().ok());
  catalog.Reconcile();
  EXPECT_EQ(catalog.cached_bytes(), 4000u);
  EXPECT_EQ(catalog.blocks(), 4u);
  // New blocks push the cache over its quota: the adopted ones (last use
  // unknown) are evicted before them.
  for (uint64_t b = 0; b < 2; ++b) {
    ASSERT_TRUE(store.Write(BlockKey{"new", b}, std::string(1000, 'n')).ok());
    catalog.Stored(BlockKey{"new", b}, 1000, kPath, kVersion);
  }
  EXPECT_LE(catalog.cached_bytes(), 3000u);
  EXPECT_TRUE(catalog.Contains(BlockKey{"new", 0}));
  EXPECT_TRUE(catalog.Contains(BlockKey{"new", 1}));
  EXPECT_EQ(catalog.cached_bytes(), store.UsedBytes());
}

// A disk of `size` bytes of which `other` are taken by something else; the
// store's writes fail past what is left.
struct FakeDisk {
  uint64_t size = 0;
  uint64_t other = 0;
  MemBlockStore* store = nullptr;
  Status Space(uint64_t* total, uint64_t* free) const {
    *total = size;
    *free = size - other - store->UsedBytes();
    return Status::Ok();
  }
  void Fill(uint64_t bytes) {
    other = bytes;
    store->SetCapacity(size - other);
  }
};

TEST(CacheCatalogTest, FullDiskCapsTheQuotaEvictsAndKeepsNetworkNearBytesRead) {
  testing::StackFixture node;
  MemBlockStore& store = node.store;
  FakeDisk fs{200 * kMiB, 0, &store};
  testing::StackConfig config;
  config.catalog = CatalogOptions{1ULL << 30, 0.95, 0.85, 1024,
                                  [&fs](uint64_t* t, uint64_t* f) { return fs.Space(t, f); }};
  config.block_size = kMiB;
  ASSERT_TRUE(node.Build(config).ok());
  CacheCatalog& catalog = node.stack().catalog();
  EXPECT_EQ(catalog.capacity_bytes(), 192 * kMiB);  // 200 MiB less the 8 MiB reserve
  // Something else fills the disk after the last look: 40 MiB left for perch.
  fs.Fill(160 * kMiB);

  FakeOrigin& origin = node.origin;
  const std::string data = Data(100 * kMiB);
  origin.AddFile("/ns/big", data);
  BlockReader& reader = node.mount().reader();
  const ObjectVersion version{data.size(), "v"};
  for (uint64_t off = 0; off < data.size(); off += 128 * 1024) {
    std::optional<Result<Bytes>> got;
    reader.Read(*ObjectPath::Parse("/ns/big"), version, "big", ByteRange{off, 128 * 1024},
                DeadlineAfter(std::chrono::seconds(5)),
                [&](Result<Bytes> r) { got = std::move(r); });
    ASSERT_TRUE(got.has_value() && got->ok()) << off;
    ASSERT_EQ(**got, data.substr(off, 128 * 1024)) << off;
  }
  // Every read succeeded; the first full write capped the quota and made room.
  EXPECT_GE(reader.stats().store_errors.load(), 1u);
  EXPECT_EQ(catalog.store_errors(), reader.stats().store_errors.load());
  EXPECT_LE(catalog.capacity_bytes(), 32 * kMiB);
  EXPECT_LE(catalog.cached_bytes(), catalog.capacity_bytes());
  EXPECT_EQ(catalog.cached_bytes(), store.UsedBytes());
  // Network bytes stay close to bytes read (no refetch per 128 KiB read).
  EXPECT_LE(origin.bytes_read.load(), data.size() * 11 / 10);
  EXPECT_NE(catalog.StoreProblem().find("quota capped"), std::string::npos)
      << catalog.StoreProblem();

  // The disk frees up again: the next look lifts the cap.
  fs.Fill(0);
  catalog.UpdateCapacity();
  EXPECT_EQ(catalog.capacity_bytes(), 192 * kMiB);
}

TEST(CacheCatalogTest, WarningLimiterLetsOneThroughAndCountsTheRest) {
  WarningLimiter limiter(std::chrono::seconds(60));
  uint64_t more = 99;
  EXPECT_TRUE(limiter.Allow(&more));
  EXPECT_EQ(more, 0u);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Allow(&more));
  WarningLimiter fast(std::chrono::seconds(0));
  EXPECT_TRUE(fast.Allow(&more));
  EXPECT_TRUE(fast.Allow(&more));
}

TEST(CacheCatalogTest, AHitOnABlockStillInMemoryCountsThePartReadNotTheBlock) {
  FakeOrigin origin;
  const std::string data = Data(4000);
  origin.AddFile("/ns/f", data);
  MemBlockStore store;
  QueuedExecutor disk;  // the block write waits: reads in between are served from memory
  BlockReader reader(origin, store, disk, BlockReaderOptions{4000});
  const ObjectVersion version{data.size(), "v"};
  auto read = [&](uint64_t off, uint64_t len) {
    std::optional<Result<Bytes>> got;
    reader.Read(kPath, version, "id", ByteRange{off, len}, DeadlineAfter(std::chrono::seconds(5)),
                [&](Result<Bytes> r) { got = std::move(r); });
    EXPECT_TRUE(got.has_value() && got->ok());
    return got && got->ok() ? **got : std::string();
  };
  EXPECT_EQ(read(0, 100), data.substr(0, 100));  // the miss
  for (uint64_t off = 100; off < 1000; off += 100) EXPECT_EQ(read(off, 100), data.substr(off, 100));
  EXPECT_EQ(reader.stats().misses.load(), 1u);
  EXPECT_EQ(reader.stats().hits.load(), 9u);
  EXPECT_EQ(reader.stats().bytes_from_cache.load(), 900u);  // not 9 x 4000
  EXPECT_EQ(reader.stats().bytes_from_network.load(), 4000u);
  disk.RunAll();  // now on "disk": hits from the store count the same way
  EXPECT_EQ(read(1000, 50), data.substr(1000, 50));
  EXPECT_EQ(reader.stats().hits.load(), 10u);
  EXPECT_EQ(reader.stats().bytes_from_cache.load(), 950u);
}

}  // namespace
}  // namespace perch::core
