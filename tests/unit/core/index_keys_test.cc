// The index's key schema is an on-disk format: a cache written by one version
// of perchd is read by the next. These spell the keys out, as docs/design.md
// ("RocksDB keys") does, so that a change to index_keys.h shows here.
#include "daemon/core/index_keys.h"

#include <gtest/gtest.h>

#include <array>
#include <string_view>

#include "daemon/core/check.h"

namespace perch::core {
namespace {

ObjectPath P(std::string_view s) { return PERCH_CHECKED(ObjectPath::Parse(s)); }

TEST(IndexKeysTest, EveryKindIsSpelledAsTheFormatSays) {
  EXPECT_EQ(index_keys::Block("0a1b", 0), "b/0a1b/0000000000000000");
  EXPECT_EQ(index_keys::Block("0a1b", 0x1234abcd), "b/0a1b/000000001234abcd");
  EXPECT_EQ(index_keys::Block("0a1b", ~uint64_t{0}), "b/0a1b/ffffffffffffffff");
  EXPECT_EQ(index_keys::Object("0a1b"), "o/0a1b");
  EXPECT_EQ(index_keys::Pin(P("/fed-0011223344556677/a/b")), "pin/fed-0011223344556677/a/b");
  EXPECT_EQ(index_keys::Attr("/fed-00", P("/a")), "na/fed-00/a");
  EXPECT_EQ(index_keys::Attr("", P("/")), "na/");
  EXPECT_EQ(index_keys::Listing("/fed-00", P("/a")), "nl/fed-00/a");
  EXPECT_EQ(index_keys::PackRecord("0a1b"), "sp/0a1b");
  EXPECT_EQ(index_keys::kScrubCursor, "scrub/cursor");
}

// Block records of one object sort by block number (the catalog's scan
// relies on it), which the fixed width gives.
TEST(IndexKeysTest, BlockKeysOfAnObjectSortByNumber) {
  EXPECT_LT(index_keys::Block("ab", 9), index_keys::Block("ab", 10));
  EXPECT_LT(index_keys::Block("ab", 0xff), index_keys::Block("ab", 0x100));
}

// A Scan of one kind never yields another: no prefix starts another.
TEST(IndexKeysTest, NoPrefixStartsAnother) {
  const std::array<std::string_view, 7> kinds = {
      index_keys::kBlock,   index_keys::kObject,     index_keys::kPin,        index_keys::kAttr,
      index_keys::kListing, index_keys::kPackRecord, index_keys::kScrubCursor};
  for (size_t i = 0; i < kinds.size(); ++i) {
    for (size_t j = 0; j < kinds.size(); ++j) {
      if (i != j) {
        EXPECT_FALSE(kinds[j].starts_with(kinds[i])) << kinds[i] << " starts " << kinds[j];
      }
    }
  }
}

}  // namespace
}  // namespace perch::core
