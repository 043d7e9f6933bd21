// NamespaceCache over a FakeOrigin and an in-memory index: answers from memory
// after the first ask, children known from their directory's listing,
// negative entries, a restart that knows the namespace without the network,
// stale entries served (offline) while the origin is down, and key prefixes
// that keep two mounts' entries apart in one index.
#include "daemon/core/namespace_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/core/codec.h"
#include "daemon/core/index_keys.h"
#include "tests/fakes/fake_origin.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::FakeOrigin;
using testing::MemIndex;
using testing::P;

// Counts what the cache asks of the federation.
class CountingOrigin : public Origin {
 public:
  explicit CountingOrigin(Origin& inner) : inner_(inner) {}
  void Stat(const ObjectPath& path, Deadline deadline,
            std::function<void(Result<FileAttr>)> done) override {
    stats++;
    inner_.Stat(path, deadline, std::move(done));
  }
  void List(const ObjectPath& path, Deadline deadline,
            std::function<void(Result<std::vector<DirEntry>>)> done) override {
    lists++;
    inner_.List(path, deadline, std::move(done));
  }
  void ReadRange(const ObjectPath& path, const ObjectVersion& version, ByteRange range,
                 Deadline deadline, std::function<void(Result<FetchedBytes>)> done) override {
    inner_.ReadRange(path, version, range, deadline, std::move(done));
  }
  std::atomic<int> stats{0}, lists{0};

 private:
  Origin& inner_;
};

Deadline Soon() { return DeadlineAfter(std::chrono::seconds(5)); }

class NamespaceCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.AddFile("/d/a.txt", "alpha");
    fake_.AddFile("/d/b.txt", "bravo!");
    fake_.AddDir("/d/sub");
  }

  FakeOrigin fake_;
  CountingOrigin origin_{fake_};
  MemIndex index_;
};

TEST_F(NamespaceCacheTest, AnswersFromMemoryAfterTheFirstAsk) {
  NamespaceCache names(origin_, index_, NamespaceOptions{});
  auto a = names.GetAttr(P("/d/a.txt"), Soon());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size, 5u);
  EXPECT_FALSE(a->is_dir);
  ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());
  EXPECT_EQ(origin_.stats, 1);
  auto list = names.ReadDir(P("/d"), Soon());
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].name, "a.txt");
  EXPECT_EQ((*list)[2].name, "sub");
  EXPECT_TRUE((*list)[2].attr.is_dir);
  ASSERT_TRUE(names.ReadDir(P("/d"), Soon()).ok());
  EXPECT_EQ(origin_.lists, 1);
}

TEST_F(NamespaceCacheTest, AListingAnswersForItsChildren) {
  NamespaceCache names(origin_, index_, NamespaceOptions{});
  ASSERT_TRUE(names.ReadDir(P("/d"), Soon()).ok());
  int stats = origin_.stats;
  auto b = names.GetAttr(P("/d/b.txt"), Soon());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size, 6u);
  EXPECT_EQ(origin_.stats, stats);
}

TEST_F(NamespaceCacheTest, AMissingPathIsRememberedAsNegative) {
  NamespaceCache names(origin_, index_, NamespaceOptions{});
  EXPECT_EQ(names.GetAttr(P("/d/nope"), Soon()).status().code(), StatusCode::kNotFound);
  int stats = origin_.stats;
  EXPECT_EQ(names.GetAttr(P("/d/nope"), Soon()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(origin_.stats, stats);
}

TEST_F(NamespaceCacheTest, ReadDirOfAFileIsInvalidArgument) {
  NamespaceCache names(origin_, index_, NamespaceOptions{});
  EXPECT_EQ(names.ReadDir(P("/d/a.txt"), Soon()).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(NamespaceCacheTest, ARestartKnowsTheNamespaceWithoutTheNetwork) {
  {
    NamespaceCache names(origin_, index_, NamespaceOptions{});
    ASSERT_TRUE(names.ReadDir(P("/d"), Soon()).ok());
    ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());
  }
  fake_.FailWith(UnavailableError("federation down"));
  NamespaceCache again(origin_, index_, NamespaceOptions{});
  EXPECT_TRUE(again.HasPersistedEntries());
  int asked = origin_.stats + origin_.lists;
  auto a = again.GetAttr(P("/d/a.txt"), Soon());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->size, 5u);
  auto list = again.ReadDir(P("/d"), Soon());
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->size(), 3u);
  EXPECT_EQ(origin_.stats + origin_.lists, asked);  // fresh entries: nothing asked
  EXPECT_FALSE(again.offline());
}

// A damaged index record whose expiry is far in the future (or past 2^63, which as a signed
// time made `expires - dir_ttl` overflow: found by the index_record fuzzer) is trusted no longer
// than a fresh answer: the listing and the file are asked of the origin again once their TTL
// from now has run out, never answered from the damaged record for ever.
TEST_F(NamespaceCacheTest, ADamagedExpiryLivesNoLongerThanItsTtl) {
  for (uint64_t damaged : {uint64_t{1} << 63, ~uint64_t{0}, uint64_t{1} << 62}) {
    MemIndex index;
    NamespaceOptions expire_at_once;
    expire_at_once.file_ttl = expire_at_once.dir_ttl = std::chrono::seconds(0);
    {
      NamespaceCache names(origin_, index, NamespaceOptions{});
      ASSERT_TRUE(names.ReadDir(P("/d"), Soon()).ok());
      ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());
    }
    std::string expiry;
    codec::PutU64(&expiry, damaged);
    // The listing's record begins with its expiry; the attributes' with exists, then expiry.
    for (auto [key, at] : {std::pair{index_keys::Listing("", P("/d")), size_t{0}},
                           std::pair{index_keys::Attr("", P("/d/a.txt")), expiry.size()}}) {
      auto v = index.Get(key);
      ASSERT_TRUE(v.ok() && v->has_value()) << key;
      std::string record = **v;
      record.replace(at, expiry.size(), expiry);
      ASSERT_TRUE(index.Apply({{key, record}}).ok());
    }
    NamespaceCache again(origin_, index, expire_at_once);
    const int lists = origin_.lists, stats = origin_.stats;
    auto list = again.ReadDir(P("/d"), Soon());
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    EXPECT_EQ(list->size(), 3u);
    EXPECT_EQ(origin_.lists, lists + 1) << damaged;
    auto a = again.GetAttr(P("/d/a.txt"), Soon());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->size, 5u);
    EXPECT_EQ(origin_.stats, stats + 1) << damaged;
  }
}

TEST_F(NamespaceCacheTest, StaleEntriesServeWhileTheOriginIsDown) {
  NamespaceOptions expire_at_once;
  expire_at_once.file_ttl = expire_at_once.dir_ttl = std::chrono::seconds(0);
  NamespaceCache names(origin_, index_, expire_at_once);
  ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());
  fake_.FailWith(UnavailableError("federation down"));
  auto stale = names.GetAttr(P("/d/a.txt"), Soon());
  ASSERT_TRUE(stale.ok()) << stale.status().ToString();
  EXPECT_EQ(stale->size, 5u);
  EXPECT_TRUE(names.offline());
  // Nothing known at all: the origin's error.
  EXPECT_EQ(names.GetAttr(P("/d/never"), Soon()).status().code(), StatusCode::kUnavailable);
  fake_.FailWith(Status::Ok());
  ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());
  EXPECT_FALSE(names.offline());
}

TEST_F(NamespaceCacheTest, KeyPrefixesKeepTwoMountsApart) {
  NamespaceOptions one, two;
  one.key_prefix = "/fed-1";
  two.key_prefix = "/fed-2";
  {
    NamespaceCache names(origin_, index_, one);
    ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());
  }
  fake_.FailWith(UnavailableError("federation down"));
  NamespaceCache first(origin_, index_, one), second(origin_, index_, two);
  EXPECT_TRUE(first.HasPersistedEntries());
  EXPECT_FALSE(second.HasPersistedEntries());
  EXPECT_TRUE(first.GetAttr(P("/d/a.txt"), Soon()).ok());
  EXPECT_EQ(second.GetAttr(P("/d/a.txt"), Soon()).status().code(), StatusCode::kUnavailable);
}

// Issue #30 item 4: a file whose answers carry a freshness lifetime
// (Cache-Control max-age=2) is answered from memory for at most that long,
// whether it came on its own or in its directory's listing. (Whole seconds:
// an answer of max-age=2 lives more than 1 s and at most 2 s.)
TEST_F(NamespaceCacheTest, AFreshnessLifetimeBoundsHowLongAFileIsAnswered) {
  fake_.MaxAge(2);
  NamespaceCache names(origin_, index_, NamespaceOptions{});
  auto a = names.GetAttr(P("/d/a.txt"), Soon());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->max_age, 2);
  ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());
  EXPECT_EQ(origin_.stats, 1);
  // b.txt from the listing: answered by it while the listing is young.
  ASSERT_TRUE(names.ReadDir(P("/d"), Soon()).ok());
  ASSERT_TRUE(names.GetAttr(P("/d/b.txt"), Soon()).ok());
  EXPECT_EQ(origin_.stats, 1);
  fake_.AddFile("/d/b.txt", "BRAVO!", 1700000100);  // replaced: the same size
  std::this_thread::sleep_for(std::chrono::milliseconds(2050));
  ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());  // unchanged, asked again
  EXPECT_EQ(origin_.stats, 2);
  EXPECT_EQ(names.revalidations(), 1u);
  EXPECT_EQ(names.revalidated_changes(), 0u);
  auto b = names.GetAttr(P("/d/b.txt"), Soon());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->mtime, 1700000100);
  EXPECT_EQ(origin_.stats, 3);
  EXPECT_EQ(names.revalidated_changes(), 1u);
  // The listing in memory (readdirplus) shows the new version too.
  auto listed = names.ReadDir(P("/d"), Soon());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ((*listed)[1].name, "b.txt");
  EXPECT_EQ((*listed)[1].attr.mtime, 1700000100);
  // Unreachable origin: what was known is served (as offline).
  fake_.FailWith(UnavailableError("down"));
  std::this_thread::sleep_for(std::chrono::milliseconds(2050));
  auto offline = names.GetAttr(P("/d/b.txt"), Soon());
  ASSERT_TRUE(offline.ok()) << offline.status().ToString();
  EXPECT_EQ(offline->mtime, 1700000100);
  fake_.FailWith(Status::Ok());
}

TEST_F(NamespaceCacheTest, AFreshnessLifetimeIsPersistedAndFilesWithoutOneLiveLong) {
  fake_.AddFile("/e/long.txt", "x");
  {
    fake_.MaxAge(600);
    NamespaceCache names(origin_, index_, NamespaceOptions{});
    ASSERT_TRUE(names.GetAttr(P("/d/a.txt"), Soon()).ok());
    fake_.MaxAge(-1);
    ASSERT_TRUE(names.GetAttr(P("/e/long.txt"), Soon()).ok());
  }
  NamespaceCache restarted(origin_, index_, NamespaceOptions{});
  const int stats = origin_.stats;
  auto a = restarted.GetAttr(P("/d/a.txt"), Soon());
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->max_age, 600);  // from the index
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto l = restarted.GetAttr(P("/e/long.txt"), Soon());
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->max_age, -1);
  EXPECT_EQ(origin_.stats, stats);
  EXPECT_EQ(restarted.revalidations(), 0u);
}

}  // namespace
}  // namespace perch::core
