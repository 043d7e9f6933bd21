// InodeTable: node ids stay with their path while the kernel holds a lookup,
// go at the last forget, are never reused, and survive a handoff whole.
#include "fuse/inode_table.h"

#include <gtest/gtest.h>

#include <string>

namespace perch::fuse {
namespace {

core::ObjectPath P(const std::string& s) { return *core::ObjectPath::Parse(s); }

std::string PathOf(const InodeTable& t, uint64_t ino) {
  core::ObjectPath p;
  return t.PathOf(ino, &p) ? p.str() : "(none)";
}

TEST(InodeTableTest, TheRootIsKnownAndNeverForgotten) {
  InodeTable t;
  EXPECT_EQ(PathOf(t, InodeTable::kRootId), "/");
  t.Forget(InodeTable::kRootId, 1000);
  EXPECT_EQ(PathOf(t, InodeTable::kRootId), "/");
  EXPECT_EQ(t.Remember(core::ObjectPath()), InodeTable::kRootId);
}

TEST(InodeTableTest, AnIdStaysUntilEveryLookupIsForgotten) {
  InodeTable t;
  const uint64_t a = t.Remember(P("/data/a"));
  EXPECT_NE(a, InodeTable::kRootId);
  EXPECT_EQ(t.Remember(P("/data/a")), a);  // two lookups held
  EXPECT_NE(t.Remember(P("/data/b")), a);
  t.Forget(a, 1);
  EXPECT_EQ(PathOf(t, a), "/data/a");
  t.Forget(a, 1);
  EXPECT_EQ(PathOf(t, a), "(none)");
  // Forgotten: the path gets a new id, the old one is not reused.
  const uint64_t again = t.Remember(P("/data/a"));
  EXPECT_GT(again, a);
}

TEST(InodeTableTest, ForgettingMoreThanHeldForgetsAllAndUnknownIdsAreIgnored) {
  InodeTable t;
  const uint64_t a = t.Remember(P("/a"));
  t.Remember(P("/a"));
  t.Forget(a, 10);
  EXPECT_EQ(PathOf(t, a), "(none)");
  t.Forget(a, 1);  // no longer known
  t.Forget(12345, 1);
  EXPECT_EQ(PathOf(t, 12345), "(none)");
}

TEST(InodeTableTest, SavedAndRestoredTheSuccessorAnswersAsThePredecessor) {
  InodeTable before;
  const uint64_t a = before.Remember(P("/ns/a"));
  before.Remember(P("/ns/a"));
  const uint64_t b = before.Remember(P("/ns/b"));
  const uint64_t gone = before.Remember(P("/ns/gone"));
  before.Forget(gone, 1);
  SessionState s;
  before.Save(&s);
  EXPECT_EQ(s.nodes.size(), 3u);  // the root, a, b

  InodeTable after;
  after.Remember(P("/other"));  // replaced by what was handed over
  ASSERT_TRUE(after.Restore(s).ok());
  EXPECT_EQ(PathOf(after, a), "/ns/a");
  EXPECT_EQ(PathOf(after, b), "/ns/b");
  EXPECT_EQ(PathOf(after, InodeTable::kRootId), "/");
  EXPECT_EQ(PathOf(after, gone), "(none)");
  EXPECT_EQ(after.Remember(P("/ns/b")), b);      // by path too
  EXPECT_GT(after.Remember(P("/other")), gone);  // ids go on from the predecessor's
  // The counts came along: a's two lookups.
  after.Forget(a, 1);
  EXPECT_EQ(PathOf(after, a), "/ns/a");
  after.Forget(a, 1);
  EXPECT_EQ(PathOf(after, a), "(none)");
}

TEST(InodeTableTest, ARestoreWithoutTheRootAddsIt) {
  SessionState s;
  s.nodes = {{5, "/x", 1}};
  s.next_ino = 6;
  InodeTable t;
  ASSERT_TRUE(t.Restore(s).ok());
  EXPECT_EQ(PathOf(t, InodeTable::kRootId), "/");
  EXPECT_EQ(t.Remember(core::ObjectPath()), InodeTable::kRootId);
  EXPECT_EQ(PathOf(t, 5), "/x");
  EXPECT_EQ(t.Remember(P("/y")), 6u);
}

TEST(InodeTableTest, ARestoreWithABadPathIsRefusedAndChangesNothing) {
  InodeTable t;
  const uint64_t a = t.Remember(P("/a"));
  SessionState s;
  s.nodes = {{1, "/", 1}, {7, "relative/../x", 1}};
  s.next_ino = 8;
  EXPECT_EQ(t.Restore(s).code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ(PathOf(t, a), "/a");
  EXPECT_EQ(PathOf(t, 7), "(none)");
}

}  // namespace
}  // namespace perch::fuse
