// The control plane's core over fakes: the catalog's object records, pins,
// prefix eviction and listing (also across a restart), and how
// NodeControl resolves the paths users give.
#include "daemon/core/node_control.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

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
    fs_ = &mount_->fs();
  }

  void ReadAll(const std::string& path) {
    auto h = fs_->Open(P(path));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    auto bytes = testing::ReadBytes(*fs_, *h, 0, 1 << 20);
    ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
    fs_->Release(*h);
  }

  std::map<std::string, CachedObject> Listed(const std::string& prefix) {
    std::map<std::string, CachedObject> out;
    for (auto& o : mount_->List(P(prefix), "", 1000)) out[o.path.str()] = o;
    return out;
  }

  StackFixture node_;
  FakeOrigin& origin_ = node_.origin;
  MemIndex& index_ = node_.index;
  MemBlockStore& store_ = node_.store;
  InlineExecutor& disk_ = node_.disk;
  Mount* mount_ = nullptr;
  CacheCatalog* catalog_ = nullptr;
  FileSystem* fs_ = nullptr;
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
  EXPECT_EQ(catalog_->evicted_bytes(), 3400u);
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
  Build(CatalogOptions{3500, 0.95, 0.5, 1024, nullptr, nullptr, nullptr});
  ASSERT_TRUE(mount_->Pin(P("/d/a.bin")).ok());
  ReadAll("/d/a.bin");
  for (int i = 0; i < 6; ++i) ReadAll("/big/x" + std::to_string(i));
  EXPECT_GT(catalog_->evictions(), 0u);
  EXPECT_EQ(Listed("/d")["/d/a.bin"].cached_bytes, 2500u);
  EXPECT_LT(Listed("/big").size(), 6u);
  EXPECT_LE(catalog_->cached_bytes(), 3500u);
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
  config.catalog = CatalogOptions{4000, 0.95, 0.5, 1, nullptr, nullptr, nullptr};
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
    auto r = testing::ReadBytes(m.fs(), *h, 0, 1 << 20);
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
  // Every fetched byte was stored once: what is not cached now was evicted.
  EXPECT_GT(s.evicted_bytes, 0u);
  EXPECT_EQ(s.evicted_bytes, s.totals.bytes_from_network - s.cached_bytes);
}

}  // namespace
}  // namespace perch::core
