// Issue 14: one record per cached object (CatalogEntry, its first block
// inline), and the catalog built on it: a restart from the index with blocks
// that have no object record, and the path index built by the first List and
// kept in step afterwards.
#include "daemon/core/catalog_entry.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/codec.h"
#include "tests/fakes/mem_block_store.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/stack_fixture.h"

namespace perch::core {
namespace {

using testing::InlineExecutor;
using testing::MemBlockStore;
using testing::MemIndex;

std::vector<std::pair<uint64_t, uint64_t>> Blocks(const CatalogEntry& e) {
  std::vector<std::pair<uint64_t, uint64_t>> out;  // (index, length)
  e.ForEach(
      [&](uint64_t index, const CatalogEntry::Block& b) { out.emplace_back(index, b.length); });
  return out;
}

TEST(CatalogEntryTest, DescriptionPacksPathAndEtag) {
  CatalogEntry e;
  EXPECT_FALSE(e.described());
  EXPECT_EQ(e.path(), "");
  e.Describe("/ns/a b", "\"1700-200\"", 200);
  EXPECT_TRUE(e.described());
  EXPECT_EQ(e.path(), "/ns/a b");
  EXPECT_EQ(e.etag(), "\"1700-200\"");
  EXPECT_EQ(e.size(), 200u);
  e.Describe("/ns/c", "", 5);  // no ETag
  EXPECT_EQ(e.path(), "/ns/c");
  EXPECT_EQ(e.etag(), "");
  EXPECT_EQ(e.size(), 5u);
}

TEST(CatalogEntryTest, FirstBlockInlineOthersApartAnyRemovalOrder) {
  CatalogEntry e;
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.Find(0), nullptr);
  auto [b7, added7] = e.Add(7);
  ASSERT_TRUE(added7);
  b7->length = 70;
  auto [b2, added2] = e.Add(2);
  ASSERT_TRUE(added2);
  b2->length = 20;
  e.Add(9).first->length = 90;
  auto again = e.Add(7);
  EXPECT_FALSE(again.second);
  EXPECT_EQ(again.first->length, 70u);
  EXPECT_EQ(e.blocks(), 3u);
  EXPECT_EQ(e.cached_bytes(), 180u);
  EXPECT_EQ(Blocks(e), (std::vector<std::pair<uint64_t, uint64_t>>{{7, 70}, {2, 20}, {9, 90}}));
  // The inline block goes first: the slot is free for the next block added.
  auto gone = e.Remove(7);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->length, 70u);
  EXPECT_FALSE(e.Remove(7).has_value());
  EXPECT_EQ(e.Find(7), nullptr);
  EXPECT_EQ(e.Find(2)->length, 20u);
  e.Add(4).first->length = 40;
  EXPECT_EQ(Blocks(e), (std::vector<std::pair<uint64_t, uint64_t>>{{4, 40}, {2, 20}, {9, 90}}));
  EXPECT_EQ(e.Remove(2)->length, 20u);
  EXPECT_EQ(e.Remove(9)->length, 90u);
  EXPECT_EQ(e.Remove(4)->length, 40u);
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.cached_bytes(), 0u);
  // The largest index (never a block number) is kept apart, not mistaken for "none".
  e.Add(~uint64_t{0}).first->length = 1;
  EXPECT_EQ(e.blocks(), 1u);
  EXPECT_EQ(e.Find(0), nullptr);
  ASSERT_NE(e.Find(~uint64_t{0}), nullptr);
}

// A restart from an index holding blocks whose object record is missing (a
// crash, or blocks adopted from the store): they count and can be evicted by
// age, List does not show them until Stored() describes their object.
TEST(CatalogEntryTest, RestartKeepsBlocksWithoutAnObjectRecordUntilDescribed) {
  MemIndex index;
  MemBlockStore store;
  InlineExecutor disk;
  const ObjectPath a = *ObjectPath::Parse("/ns/a");
  const std::string id_a = codec::StableId("a"), id_b = codec::StableId("b");
  {
    CacheCatalog catalog(index, store, disk, CatalogOptions{}, nullptr);
    ASSERT_TRUE(catalog.Load().ok());
    for (uint64_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(store.Write(BlockKey{id_a, i}, std::string(100, 'a')).ok());
      catalog.Stored(BlockKey{id_a, i}, 100, a, ObjectVersion{300, "ea"});
    }
    ASSERT_TRUE(store.Write(BlockKey{id_b, 0}, std::string(10, 'b')).ok());
    catalog.Stored(BlockKey{id_b, 0}, 10, *ObjectPath::Parse("/ns/b"), ObjectVersion{10, ""});
  }
  ASSERT_TRUE(index.Apply({{"o/" + id_b, std::nullopt}}).ok());  // lost
  CacheCatalog catalog(index, store, disk, CatalogOptions{}, nullptr);
  ASSERT_TRUE(catalog.Load().ok());
  catalog.Reconcile();
  EXPECT_EQ(catalog.blocks(), 4u);
  EXPECT_EQ(catalog.cached_bytes(), 310u);
  EXPECT_EQ(catalog.CachedBytes(id_a), 300u);
  EXPECT_EQ(catalog.CachedBytes(id_b), 10u);
  auto listed = catalog.List(ObjectPath(), "", 10);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].path, a);
  EXPECT_EQ(listed[0].blocks, 3u);
  EXPECT_EQ(listed[0].size, 300u);
  // A read stores b's block again: b is described, listed and recorded.
  catalog.Stored(BlockKey{id_b, 0}, 10, *ObjectPath::Parse("/ns/b"), ObjectVersion{10, "eb"});
  EXPECT_EQ(catalog.blocks(), 4u);
  EXPECT_EQ(catalog.cached_bytes(), 310u);
  listed = catalog.List(ObjectPath(), "", 10);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[1].path.str(), "/ns/b");
  EXPECT_TRUE(index.Get("o/" + id_b)->has_value());
}

// The path index exists once List has run; objects stored and dropped after
// that come and go in it.
TEST(CatalogEntryTest, PathIndexBuiltByTheFirstListFollowsLaterChanges) {
  MemIndex index;
  MemBlockStore store;
  InlineExecutor disk;
  CacheCatalog catalog(index, store, disk, CatalogOptions{}, nullptr);
  ASSERT_TRUE(catalog.Load().ok());
  auto store_one = [&](const std::string& p) {
    const std::string id = codec::StableId(p);
    ASSERT_TRUE(store.Write(BlockKey{id, 0}, "x").ok());
    catalog.Stored(BlockKey{id, 0}, 1, *ObjectPath::Parse(p), ObjectVersion{1, ""});
  };
  auto paths = [&] {
    std::vector<std::string> out;
    for (const CachedObject& o : catalog.List(ObjectPath(), "", 100)) out.push_back(o.path.str());
    return out;
  };
  store_one("/d/b");
  store_one("/d/a");
  EXPECT_EQ(paths(), (std::vector<std::string>{"/d/a", "/d/b"}));
  store_one("/c");
  store_one("/d/c");
  EXPECT_EQ(paths(), (std::vector<std::string>{"/c", "/d/a", "/d/b", "/d/c"}));
  catalog.Dropped(BlockKey{codec::StableId("/d/a"), 0});
  auto evicted = catalog.Evict(*ObjectPath::Parse("/d/c"));
  ASSERT_TRUE(evicted.ok());
  EXPECT_EQ(evicted->blocks, 1u);
  EXPECT_EQ(paths(), (std::vector<std::string>{"/c", "/d/b"}));
  EXPECT_EQ(catalog.blocks(), 2u);
}

}  // namespace
}  // namespace perch::core
