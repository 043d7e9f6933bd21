// CacheStack's own policy over fakes: statfs figures from the quota, the
// extended attributes a file shows, whether a mount may start (offline with
// a warm cache only), and the prefetch caps taken from the effective quota.
#include "daemon/core/cache_stack.h"

#include <gtest/gtest.h>

#include "tests/fakes/read_bytes.h"
#include "tests/fakes/stack_fixture.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::Data;
using testing::P;
using testing::StackConfig;
using testing::StackFixture;

std::string ReadAll(Mount& m, const std::string& path) {
  auto h = m.fs().Open(P(path));
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  if (!h.ok()) return {};
  auto r = testing::ReadBytes(m.fs(), *h, 0, 1 << 20);
  m.fs().Release(*h);
  return r.ok() ? *r : std::string();
}

TEST(CacheStackTest, StatFsShowsTheQuotaAndWhatIsLeftOfIt) {
  StackFixture node;
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  StackConfig config;
  config.catalog = CatalogOptions{100 * 1024, 0.95, 0.85, 1, nullptr, nullptr};
  ASSERT_TRUE(node.Build(config).ok());
  uint64_t blocks = 0, free = 0;
  node.stack().StatFs(1024, &blocks, &free);
  EXPECT_EQ(blocks, 100u);
  EXPECT_EQ(free, 100u);
  ASSERT_EQ(ReadAll(node.mount(), "/d/a.bin"), Data(2500, 1));
  node.stack().StatFs(1024, &blocks, &free);
  EXPECT_EQ(free, (100 * 1024 - 2500) / 1024);
}

TEST(CacheStackTest, XattrsNameTheFederationTheUrlAndWhatIsCached) {
  StackFixture node;
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  StackConfig config;
  config.first_mount = false;
  ASSERT_TRUE(node.Build(config).ok());
  MountSpec spec;
  spec.federation_id = "pelican://fed.example/ns";
  spec.federation_prefix = P("/ns");
  spec.origin = &node.origin;
  spec.last_server = [](const ObjectPath&) { return std::string("https://cache.example:8443"); };
  Mount& m = **node.stack().AddMount(std::move(spec));
  auto attr = m.fs().GetAttr(P("/d/a.bin"));
  ASSERT_TRUE(attr.ok());
  auto x = m.Xattrs(P("/d/a.bin"), *attr);
  EXPECT_EQ(x["user.perch.federation"], "pelican://fed.example/ns");
  EXPECT_EQ(x["user.perch.url"], "pelican://fed.example/ns/d/a.bin");
  EXPECT_EQ(x["user.perch.cached_bytes"], "0");
  EXPECT_EQ(x["user.perch.cache_id"], m.fs().ObjectId(P("/d/a.bin"), *attr));
  EXPECT_EQ(x["user.perch.server"], "https://cache.example:8443");
  ASSERT_EQ(ReadAll(m, "/d/a.bin"), Data(2500, 1));
  EXPECT_EQ(m.Xattrs(P("/d/a.bin"), *attr)["user.perch.cached_bytes"], "2500");
  auto dir = m.Xattrs(P("/d"), *m.fs().GetAttr(P("/d")));
  EXPECT_EQ(dir.size(), 1u);  // a directory names its federation only
}

TEST(CacheStackTest, AMountStartsOfflineOnlyWithAWarmCache) {
  StackFixture node;
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  StackConfig config;
  config.names.file_ttl = config.names.dir_ttl = config.names.negative_ttl =
      std::chrono::seconds(-1);
  ASSERT_TRUE(node.Build(config).ok());
  EXPECT_TRUE(node.mount().CheckRoot(std::chrono::seconds(1)).ok());

  // A cold cache and no federation: nothing to serve.
  testing::FakeOrigin down;
  down.FailWith(UnavailableError("federation down"));
  auto cold = node.AddMount(down, "pelican://down.example/");
  ASSERT_TRUE(cold.ok());
  Status s = (*cold)->CheckRoot(std::chrono::seconds(1));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("pelican://down.example/"), std::string::npos) << s.message();

  // A warm cache: the restarted mount serves offline.
  ASSERT_EQ(ReadAll(node.mount(), "/d/a.bin"), Data(2500, 1));
  node.origin.FailWith(UnavailableError("federation down"));
  ASSERT_TRUE(node.Build(config).ok());
  EXPECT_TRUE(node.mount().CheckRoot(std::chrono::seconds(1)).ok());
  EXPECT_EQ(ReadAll(node.mount(), "/d/a.bin"), Data(2500, 1));
  EXPECT_TRUE(node.mount().offline());
  // The other federation's warm cache does not make this one's.
  auto still_cold = node.AddMount(down, "pelican://down.example/");
  ASSERT_TRUE(still_cold.ok());
  EXPECT_FALSE((*still_cold)->CheckRoot(std::chrono::seconds(1)).ok());
}

// A cache written before mount tags (untagged "na/<path>" keys): its only
// mount takes the entries over once, so it still starts offline.
TEST(CacheStackTest, TheOnlyMountAdoptsUntaggedNamespaceEntries) {
  StackFixture node;
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  StackConfig config;
  config.first_mount = false;
  ASSERT_TRUE(node.Build(config).ok());
  ASSERT_TRUE(node.AddMount(node.origin, "fed").ok());
  ASSERT_TRUE(
      node.stack().mounts()[0]->CheckRoot(std::chrono::seconds(1)).ok());  // as perchd starts
  ASSERT_EQ(ReadAll(*node.stack().mounts()[0], "/d/a.bin"), Data(2500, 1));
  const std::string tag = CacheStack::TagOf("fed");
  // Rewrite the entries as the old layout had them.
  std::vector<Index::Write> old;
  ASSERT_TRUE(node.index
                  .Scan("n",
                        [&](std::string_view k, std::string_view v) {
                          std::string path(k.substr(2 + 1 + tag.size()));
                          old.push_back({std::string(k.substr(0, 2)) + path, std::string(v)});
                          old.push_back({std::string(k), std::nullopt});
                          return true;
                        })
                  .ok());
  ASSERT_FALSE(old.empty());
  ASSERT_TRUE(node.index.Apply(old).ok());
  ASSERT_EQ(node.index.CountPrefix("na/" + tag), 0u);
  ASSERT_TRUE(node.index.Get("na/")->has_value());

  node.origin.FailWith(UnavailableError("federation down"));
  ASSERT_TRUE(node.Build(config).ok());
  MountSpec spec;
  spec.federation_id = "fed";
  spec.origin = &node.origin;
  spec.adopt_untagged_entries = true;
  Mount& m = **node.stack().AddMount(std::move(spec));
  EXPECT_TRUE(m.CheckRoot(std::chrono::seconds(1)).ok());
  EXPECT_EQ(ReadAll(m, "/d/a.bin"), Data(2500, 1));  // blocks kept their ids
  EXPECT_FALSE(node.index.Get("na/")->has_value());
  EXPECT_GT(node.index.CountPrefix("na/" + tag + "/"), 0u);
  EXPECT_EQ(node.index.CountPrefix("na/d"), 0u);
}

TEST(CacheStackTest, PrefetchIsCappedToAnEighthOfTheQuota) {
  StackFixture node;
  node.origin.AddFile("/big.bin", Data(20000, 1));  // 20 blocks of 1000
  StackConfig config;
  config.catalog = CatalogOptions{16000, 0.95, 0.85, 1, nullptr, nullptr};  // an eighth: 2 blocks
  config.prefetch = true;
  config.prefetch_options.directories = false;
  config.prefetch_options.max_window_bytes = 64ULL << 20;
  ASSERT_TRUE(node.Build(config).ok());
  auto h = node.mount().fs().Open(P("/big.bin"));
  ASSERT_TRUE(h.ok());
  for (uint64_t off = 0; off < 8000; off += 1000)
    ASSERT_TRUE(testing::ReadBytes(node.mount().fs(), *h, off, 1000).ok());
  node.mount().fs().Release(*h);
  // Never more than two blocks ahead of the reader, whatever the configured window.
  EXPECT_LE(node.origin.reads.load(), 8 + 2);
}

}  // namespace
}  // namespace perch::core
