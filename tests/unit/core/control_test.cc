// The control plane's core over fakes: the catalog's object records, pins,
// prefix eviction and listing (also across a restart), the Warmer, and how
// NodeControl resolves the paths users give.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/filesystem.h"
#include "daemon/core/node_control.h"
#include "daemon/core/warmer.h"
#include "tests/fakes/fake_origin.h"
#include "tests/fakes/mem_block_store.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::FakeOrigin;
using testing::InlineExecutor;
using testing::MemBlockStore;
using testing::MemIndex;
using testing::Data;
using testing::P;


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
    warmer_.reset();
    fs_.reset();
    reader_.reset();
    catalog_.reset();
    names_.reset();
    catalog_ = std::make_unique<CacheCatalog>(index_, store_, disk_, copts,
                                              [this](const BlockKey& k) { return reader_ && reader_->InUse(k); });
    ASSERT_TRUE(catalog_->Load().ok());
    names_ = std::make_unique<NamespaceCache>(origin_, index_, NamespaceOptions{});
    reader_ = std::make_unique<BlockReader>(origin_, store_, disk_, BlockReaderOptions{1000}, catalog_.get());
    fs_ = std::make_unique<FileSystem>(*names_, *reader_, FileSystemOptions{std::chrono::milliseconds(2000), "fed"});
    warmer_ = std::make_unique<Warmer>(*fs_, *reader_, *catalog_, disk_, WarmerOptions{});
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
    for (auto& o : catalog_->List(P(prefix), "", 1000)) out[o.path.str()] = o;
    return out;
  }

  WarmProgress Warm(std::vector<ObjectPath> paths, bool recursive) {
    auto job = warmer_->Start(std::move(paths), recursive, nullptr);
    EXPECT_TRUE(job->finished());  // inline executor, synchronous origin
    return job->Progress();
  }

  FakeOrigin origin_;
  MemIndex index_;
  MemBlockStore store_;
  InlineExecutor disk_;
  std::unique_ptr<CacheCatalog> catalog_;
  std::unique_ptr<NamespaceCache> names_;
  std::unique_ptr<BlockReader> reader_;
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<Warmer> warmer_;
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
  auto first = catalog_->List(P("/"), "", 1);
  ASSERT_EQ(first.size(), 1u);
  auto second = catalog_->List(P("/"), first[0].path.str(), 1);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_NE(first[0].path, second[0].path);
  EXPECT_TRUE(catalog_->List(P("/"), second[0].path.str(), 1).empty());

  ASSERT_TRUE(catalog_->Pin(P("/d/sub")).ok());
  Build(CatalogOptions{});
  listed = Listed("/");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed["/d/a.bin"].cached_bytes, 2500u);
  EXPECT_TRUE(listed["/d/sub/c.txt"].pinned);
  EXPECT_FALSE(listed["/d/a.bin"].pinned);
  EXPECT_EQ(catalog_->Pins(), std::vector<ObjectPath>{P("/d/sub")});
  EXPECT_EQ(catalog_->pinned_bytes(), 5u);
}

TEST_F(ControlCoreTest, EvictRemovesAPrefixButKeepsPins) {
  ReadAll("/d/a.bin");
  ReadAll("/d/b.bin");
  ReadAll("/d/sub/c.txt");
  ASSERT_TRUE(catalog_->Pin(P("/d/sub")).ok());
  auto r = catalog_->Evict(P("/d"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->objects, 2u);
  EXPECT_EQ(r->blocks, 4u);
  EXPECT_EQ(r->bytes, 3400u);
  EXPECT_EQ(r->pinned_objects, 1u);
  EXPECT_EQ(catalog_->cached_bytes(), 5u);
  EXPECT_EQ(index_.CountPrefix("o/"), 1u);  // object records go with their last block
  EXPECT_EQ(index_.CountPrefix("b/"), 1u);

  EXPECT_EQ(catalog_->Unpin(P("/d")).code(), StatusCode::kNotFound);
  ASSERT_TRUE(catalog_->Unpin(P("/d/sub")).ok());
  r = catalog_->Evict(P("/"));
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
  ASSERT_TRUE(catalog_->Pin(P("/d/a.bin")).ok());
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

// Runs every task on a thread of its own, so that warm bookkeeping races.
class ThreadPerTaskExecutor : public Executor {
 public:
  ~ThreadPerTaskExecutor() override { Join(); }
  void Post(std::function<void()> task) override {
    std::lock_guard<std::mutex> l(mu_);
    threads_.emplace_back(std::move(task));
  }
  void PostAfter(std::chrono::milliseconds, std::function<void()> task) override { Post(std::move(task)); }
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

TEST_F(ControlCoreTest, ResolvesMountPathsUrlsAndFederationPaths) {
  OpMetrics ops;
  NodeInfo info;
  info.mountpoint = "/mnt/osdf";
  info.federation_url = "pelican://fed.example/ns";
  info.federation_prefix = P("/ns");
  info.path_of_url = [](std::string_view url) -> Result<std::string> {
    if (url.starts_with("pelican://fed.example/")) return std::string(url.substr(21));
    return InvalidArgumentError("another federation");
  };
  NodeControl node(info, *reader_, *catalog_, *warmer_, origin_, disk_, ops, nullptr, nullptr, nullptr, nullptr);
  EXPECT_EQ(node.Resolve("/mnt/osdf/d/a.bin")->str(), "/d/a.bin");
  EXPECT_EQ(node.Resolve("/mnt/osdf")->str(), "/");
  EXPECT_EQ(node.Resolve("/mnt/osdf/d//sub/")->str(), "/d/sub");
  EXPECT_EQ(node.Resolve("/ns/d")->str(), "/d");
  EXPECT_EQ(node.Resolve("pelican://fed.example/ns/d/b.bin")->str(), "/d/b.bin");
  EXPECT_EQ(node.Resolve("pelican://other.example/ns/d").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(node.Resolve("/mnt/osdfx/d").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(node.Resolve("/nsx").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(node.Resolve("relative/path").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(node.Resolve("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(node.FederationPath(P("/d/a.bin")), "/ns/d/a.bin");
  EXPECT_EQ(node.FederationPath(P("/")), "/ns");
}

}  // namespace
}  // namespace perch::core
