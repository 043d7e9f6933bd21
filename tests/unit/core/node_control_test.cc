// The control plane's core over fakes: the catalog's object records, pins,
// prefix eviction and listing (also across a restart), the Warmer, and how
// NodeControl resolves the paths users give.
#include "daemon/core/node_control.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <thread>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/cache_stack.h"
#include "daemon/core/filesystem.h"
#include "daemon/core/warmer.h"
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

class ControlCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    origin_.AddFile("/d/a.bin", Data(2500, 1));  // 3 blocks of 1000
    origin_.AddFile("/d/b.bin", Data(900, 2));
    origin_.AddFile("/d/sub/c.txt", "hello");
    for (int i = 0; i < 6; ++i) origin_.AddFile("/big/x" + std::to_string(i), Data(900, 10 + i));
    Build(CatalogOptions{});
  }

  // (Re)builds the stack over the same index and store, as a restart does.
  void Build(CatalogOptions copts) {
    StackConfig config;
    config.catalog = copts;
    ASSERT_TRUE(node_.Build(config).ok());
    mount_ = &node_.mount();
    catalog_ = &node_.stack().catalog();
    reader_ = &mount_->reader();
    fs_ = &mount_->fs();
    warmer_ = &mount_->warmer();
  }

  void ReadAll(const std::string& path) {
    auto h = fs_->Open(P(path));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    auto bytes = fs_->Read(*h, 0, 1 << 20);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    fs_->Release(*h);
  }

  std::map<std::string, CachedObject> Listed(const std::string& prefix) {
    std::map<std::string, CachedObject> out;
    for (auto& o : mount_->List(P(prefix), "", 1000)) out[o.path.str()] = o;
    return out;
  }

  WarmProgress Warm(std::vector<ObjectPath> paths, bool recursive) {
    auto job = warmer_->Start(std::move(paths), recursive, nullptr);
    EXPECT_TRUE(job->finished());  // inline executor, synchronous origin
    return job->Progress();
  }

  StackFixture node_;
  FakeOrigin& origin_ = node_.origin;
  MemIndex& index_ = node_.index;
  MemBlockStore& store_ = node_.store;
  InlineExecutor& disk_ = node_.disk;
  Mount* mount_ = nullptr;
  CacheCatalog* catalog_ = nullptr;
  BlockReader* reader_ = nullptr;
  FileSystem* fs_ = nullptr;
  Warmer* warmer_ = nullptr;
};

TEST_F(ControlCoreTest, ListsCachedObjectsByPathAcrossARestart) {
  ReadAll("/d/a.bin");
  ReadAll("/d/sub/c.txt");
  auto listed = Listed("/");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed["/d/a.bin"].size, 2500u);
  EXPECT_EQ(listed["/d/a.bin"].cached_bytes, 2500u);
  EXPECT_EQ(listed["/d/a.bin"].blocks, 3u);
  EXPECT_EQ(listed["/d/sub/c.txt"].cached_bytes, 5u);
  EXPECT_EQ(catalog_->CachedBytes(listed["/d/a.bin"].object_id), 2500u);
  EXPECT_EQ(catalog_->CachedBytes("no-such-object"), 0u);
  EXPECT_EQ(Listed("/d/sub").size(), 1u);
  EXPECT_TRUE(Listed("/big").empty());

  // Pages: the token is the last path of the previous page.
  auto first = mount_->List(P("/"), "", 1);
  ASSERT_EQ(first.size(), 1u);
  auto second = mount_->List(P("/"), first[0].path.str(), 1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(first[0].path, second[0].path);
  EXPECT_TRUE(mount_->List(P("/"), second[0].path.str(), 1).empty());

  ASSERT_TRUE(mount_->Pin(P("/d/sub")).ok());
  Build(CatalogOptions{});
  listed = Listed("/");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed["/d/a.bin"].cached_bytes, 2500u);
  EXPECT_TRUE(listed["/d/sub/c.txt"].pinned);
  EXPECT_FALSE(listed["/d/a.bin"].pinned);
  EXPECT_EQ(mount_->Pins(), std::vector<ObjectPath>{P("/d/sub")});
  EXPECT_EQ(catalog_->pinned_bytes(), 5u);
}

TEST_F(ControlCoreTest, EvictRemovesAPrefixButKeepsPins) {
  ReadAll("/d/a.bin");
  ReadAll("/d/b.bin");
  ReadAll("/d/sub/c.txt");
  ASSERT_TRUE(mount_->Pin(P("/d/sub")).ok());
  auto r = mount_->Evict(P("/d"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->objects, 2u);
  EXPECT_EQ(r->blocks, 4u);
  EXPECT_EQ(r->bytes, 3400u);
  EXPECT_EQ(r->pinned_objects, 1u);
  EXPECT_EQ(catalog_->cached_bytes(), 5u);
  EXPECT_EQ(index_.CountPrefix("o/"), 1u);  // object records go with their last block
  EXPECT_EQ(index_.CountPrefix("b/"), 1u);

  EXPECT_EQ(mount_->Unpin(P("/d")).code(), StatusCode::kNotFound);
  ASSERT_TRUE(mount_->Unpin(P("/d/sub")).ok());
  r = mount_->Evict(P("/"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->objects, 1u);
  EXPECT_EQ(catalog_->cached_bytes(), 0u);
  EXPECT_EQ(index_.CountPrefix("o/"), 0u);

  int reads = origin_.reads;
  ReadAll("/d/b.bin");
  EXPECT_EQ(origin_.reads, reads + 1);  // evicted: fetched again
}

TEST_F(ControlCoreTest, QuotaEvictionSparesPinnedObjects) {
  Build(CatalogOptions{3500, 0.95, 0.5, 1024, nullptr});
  ASSERT_TRUE(mount_->Pin(P("/d/a.bin")).ok());
  ReadAll("/d/a.bin");
  for (int i = 0; i < 6; ++i) ReadAll("/big/x" + std::to_string(i));
  EXPECT_GT(catalog_->evictions(), 0u);
  EXPECT_EQ(Listed("/d")["/d/a.bin"].cached_bytes, 2500u);
  EXPECT_LT(Listed("/big").size(), 6u);
  EXPECT_LE(catalog_->cached_bytes(), 3500u);
}

TEST_F(ControlCoreTest, WarmFetchesEachMissingBlockOnce) {
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
  EXPECT_EQ(Listed("/d").size(), 3u);

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

TEST_F(ControlCoreTest, WarmReportsWhatItCouldNotFetch) {
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

TEST_F(ControlCoreTest, CancelStopsIssuingFetches) {
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

// Issue 14: the walk stays at most `max_files_queued` files ahead of the
// fetches (it pauses, and a completion resumes it), so a warm of a million
// files never holds them all; it still finds and fetches every file.
TEST_F(ControlCoreTest, WarmWalkPausesWhileFilesWaitForFetches) {
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

// Regression: progress snapshots taken on two threads were delivered out of
// order, so a warm stream could end on an unfinished snapshot and never
// finish. The walk's last snapshot is held back here while the fetches
// complete on other threads; the finished snapshot must still come last.
TEST_F(ControlCoreTest, ProgressReachesListenersInOrderAndEndsFinished) {
  ThreadPerTaskExecutor threads;
  std::atomic<bool> walk_waiting{false};
  WarmerOptions opts;
  opts.before_notify_for_test = [&](const WarmProgress& p) {
    if (p.listing_done && !p.finished && !walk_waiting.exchange(true)) {
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
  while (!walk_waiting) std::this_thread::sleep_for(std::chrono::milliseconds(1));
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

// A mount spec as perchd makes one: a mountpoint, a prefix and URLs of its federation.
MountSpec SpecOf(Origin& origin, const std::string& host, const std::string& prefix,
                 const std::string& mountpoint) {
  MountSpec spec;
  spec.federation_id = "pelican://" + host + prefix;
  spec.federation = "pelican://" + host;
  spec.federation_prefix = P(prefix);
  spec.origin = &origin;
  spec.mountpoint = mountpoint;
  spec.path_of_url = [host](std::string_view url) -> Result<std::string> {
    const std::string scheme = "pelican://" + host + "/";
    if (url.starts_with(scheme)) return std::string(url.substr(scheme.size() - 1));
    return InvalidArgumentError(std::string(url) + " names another federation");
  };
  return spec;
}

TEST_F(ControlCoreTest, ResolvesMountPathsUrlsAndFederationPaths) {
  OpMetrics ops;
  StackFixture node;
  StackConfig config;
  config.first_mount = false;
  ASSERT_TRUE(node.Build(config).ok());
  auto added = node.stack().AddMount(SpecOf(origin_, "fed.example", "/ns", "/mnt/osdf"));
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  Mount& m = **added;
  NodeControl control(node.stack(), "/cache", ops);
  auto resolved = [&](std::string_view p) -> std::string {
    auto r = control.Resolve(p);
    if (!r.ok()) return "error: " + r.status().message();
    ObjectPath below;
    Mount* of = node.stack().MountOfCatalogPath(*r, &below);
    return of == &m ? below.str() : "another mount: " + r->str();
  };
  EXPECT_EQ(resolved("/mnt/osdf/d/a.bin"), "/d/a.bin");
  EXPECT_EQ(resolved("/mnt/osdf"), "/");
  EXPECT_EQ(resolved("/mnt/osdf/d//sub/"), "/d/sub");
  EXPECT_EQ(resolved("/ns/d"), "/d");
  EXPECT_EQ(resolved("pelican://fed.example/ns/d/b.bin"), "/d/b.bin");
  EXPECT_EQ(control.Resolve("pelican://other.example/ns/d").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(control.Resolve("/mnt/osdfx/d").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(control.Resolve("/nsx").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(control.Resolve("relative/path").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(control.Resolve("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(control.FederationPath(m.CatalogPath(P("/d/a.bin"))), "/ns/d/a.bin");
  EXPECT_EQ(control.FederationPath(m.CatalogPath(P("/"))), "/ns");
  EXPECT_EQ(control.FederationOf(m.CatalogPath(P("/d"))), "pelican://fed.example/ns");
}

// Two federations in one node: paths resolve to the right mount (a path both
// hold is ambiguous), one quota evicts across both, namespaces keep their
// entries apart in the shared index, and per-namespace counts add up.
TEST_F(ControlCoreTest, TwoFederationsShareOneCacheAndStayApart) {
  testing::FakeOrigin other;
  other.AddFile("/d/a.bin", Data(2500, 99));  // the same path as origin_'s, other bytes
  for (int i = 0; i < 4; ++i) other.AddFile("/more/y" + std::to_string(i), Data(900, 50 + i));
  StackFixture node;
  StackConfig config;
  config.catalog = CatalogOptions{4000, 0.95, 0.5, 1, nullptr};
  config.first_mount = false;
  ASSERT_TRUE(node.Build(config).ok());
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  for (int i = 0; i < 4; ++i) node.origin.AddFile("/big/x" + std::to_string(i), Data(900, 10 + i));
  Mount& one = **node.stack().AddMount(SpecOf(node.origin, "one.example", "/", "/mnt/one"));
  Mount& two = **node.stack().AddMount(SpecOf(other, "two.example", "/", "/mnt/two"));
  EXPECT_EQ(node.stack().AddMount(SpecOf(other, "two.example", "/", "/mnt/again")).status().code(),
            StatusCode::kInvalidArgument);
  OpMetrics ops;
  NodeControl control(node.stack(), "/cache", ops);

  auto read_all = [](Mount& m, const std::string& path) {
    auto h = m.fs().Open(P(path));
    EXPECT_TRUE(h.ok()) << path << ": " << h.status().ToString();
    if (!h.ok()) return std::string();
    auto r = m.fs().Read(*h, 0, 1 << 20);
    m.fs().Release(*h);
    return r.ok() ? *r : std::string();
  };
  EXPECT_EQ(read_all(one, "/d/a.bin"), Data(2500, 1));
  EXPECT_EQ(read_all(two, "/d/a.bin"), Data(2500, 99));  // same path, its own bytes
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(read_all(one, "/big/x" + std::to_string(i)), Data(900, 10 + i));
    EXPECT_EQ(read_all(two, "/more/y" + std::to_string(i)), Data(900, 50 + i));
    EXPECT_LE(node.stack().catalog().cached_bytes(), 4000u);
  }
  EXPECT_GT(node.stack().catalog().evictions(), 0u);
  // The last files read by each mount survived; the oldest blocks of both went.
  EXPECT_FALSE(one.List(P("/big"), "", 10).empty());
  EXPECT_FALSE(two.List(P("/more"), "", 10).empty());
  EXPECT_LT(one.List(P("/"), "", 10).size() + two.List(P("/"), "", 10).size(), 10u);

  // Paths: by mount, by URL; a federation path both hold is ambiguous.
  ObjectPath below;
  EXPECT_EQ(node.stack().MountOfCatalogPath(*control.Resolve("/mnt/two/d/a.bin"), &below), &two);
  EXPECT_EQ(below, P("/d/a.bin"));
  EXPECT_EQ(node.stack().MountOfCatalogPath(*control.Resolve("pelican://one.example/d"), &below),
            &one);
  auto ambiguous = control.Resolve("/d/a.bin");
  EXPECT_EQ(ambiguous.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ambiguous.status().message().find("one.example"), std::string::npos);
  EXPECT_NE(ambiguous.status().message().find("two.example"), std::string::npos);

  // Evicting one mount's directory leaves the other's file of the same path.
  ASSERT_TRUE(two.Evict(P("/d")).ok());
  EXPECT_TRUE(two.List(P("/d"), "", 10).empty());
  ASSERT_TRUE(one.Pin(P("/d")).ok());
  EXPECT_EQ(one.Pins(), std::vector<ObjectPath>{P("/d")});
  EXPECT_TRUE(two.Pins().empty());

  // Namespace entries of each mount live under its own key prefix.
  EXPECT_GT(node.index.CountPrefix("na/" + one.tag() + "/"), 0u);
  EXPECT_GT(node.index.CountPrefix("na/" + two.tag() + "/"), 0u);
  EXPECT_EQ(node.index.CountPrefix("na/d"), 0u);

  // Counts: per namespace, per federation, adding up to the totals.
  StatsSnapshot s = control.Stats();
  ReadCounters::Values sum;
  std::set<std::string> federations;
  for (const NamespaceCounters& n : s.namespaces) {
    federations.insert(n.federation);
    sum.hits += n.values.hits;
    sum.misses += n.values.misses;
    sum.bytes_from_cache += n.values.bytes_from_cache;
    sum.bytes_from_network += n.values.bytes_from_network;
  }
  EXPECT_EQ(federations,
            (std::set<std::string>{"pelican://one.example/", "pelican://two.example/"}));
  EXPECT_EQ(sum.misses, s.totals.misses);
  EXPECT_EQ(sum.bytes_from_network, s.totals.bytes_from_network);
  EXPECT_EQ(s.totals.bytes_from_network, 2 * 2500u + 8 * 900u);
  EXPECT_EQ(sum.hits, s.totals.hits);
  EXPECT_EQ(sum.bytes_from_cache, s.totals.bytes_from_cache);
}

}  // namespace
}  // namespace perch::core
