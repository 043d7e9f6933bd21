// OpenPolicy: each branch of the kernel's side of an open. The mount's mode
// at INIT and the decision after `decide_after` opens; an inode's opens all
// in one mode, its backing file held while files pass through to it and
// given back with the last; the state handed to a successor whole.
#include "fuse/open_policy.h"

#include <gtest/gtest.h>

#include <memory>

#include "daemon/core/block_store.h"

namespace perch::fuse {
namespace {

using Decision = OpenPolicy::Decision;

OpenPolicy::Backing File() { return std::make_shared<const core::BlockFd>(-1); }

// The first open `fh` of `ino`, as FuseServer makes it: joins the inode's
// mode, else is counted and offers backing file `id` (0: none).
OpenPolicy::Mode Open(OpenPolicy& p, uint64_t ino, uint64_t fh, int32_t id,
                      const OpenPolicy::Backing& backing = nullptr, bool large = true) {
  if (auto mode = p.Join(ino, fh)) return *mode;
  p.Count(large);
  return p.Settle(ino, fh, id, backing).mode;
}

TEST(OpenPolicyTest, AtInitNoOpenAloneAnswersNoOpen) {
  OpenPolicy p(4);
  p.Start(/*passthrough=*/false, /*no_open=*/true);
  EXPECT_TRUE(p.no_open());
  EXPECT_FALSE(p.deciding());
}

TEST(OpenPolicyTest, AtInitPassthroughAloneAnswersOpensAndDecidesNothing) {
  OpenPolicy p(4);
  p.Start(/*passthrough=*/true, /*no_open=*/false);
  EXPECT_FALSE(p.no_open());
  EXPECT_FALSE(p.deciding());
  for (uint64_t i = 1; i <= 10; ++i) Open(p, 100 + i, i, 0, nullptr, /*large=*/false);
  EXPECT_EQ(p.Decide().kind, Decision::kNotYet);  // never: nothing to decide
  EXPECT_FALSE(p.no_open());
}

TEST(OpenPolicyTest, AtInitNeitherAnswersOpensAndBothDecideLater) {
  OpenPolicy neither(4);
  neither.Start(false, false);
  EXPECT_FALSE(neither.no_open());
  EXPECT_FALSE(neither.deciding());
  OpenPolicy both(4);
  both.Start(true, true);
  EXPECT_FALSE(both.no_open());
  EXPECT_TRUE(both.deciding());
}

TEST(OpenPolicyTest, TheFirstOpenWithABackingFilePassesThroughAndLaterOnesJoinIt) {
  OpenPolicy p(256);
  p.Start(true, false);
  auto file = File();
  const OpenPolicy::Settled first = [&] {
    EXPECT_FALSE(p.Join(7, 1).has_value());  // no open file of inode 7 yet
    return p.Settle(7, 1, /*backing_id=*/42, file);
  }();
  EXPECT_TRUE(first.used);
  EXPECT_TRUE(first.mode.direct);
  EXPECT_EQ(first.mode.backing_id, 42);
  EXPECT_EQ(file.use_count(), 2);  // held while files pass through to it
  auto second = p.Join(7, 2);
  ASSERT_TRUE(second.has_value());
  EXPECT_TRUE(second->direct);
  EXPECT_EQ(second->backing_id, 42);
}

TEST(OpenPolicyTest, WithoutABackingFileTheInodeIsCachedAndStaysSoWhileOpen) {
  OpenPolicy p(256);
  p.Start(true, false);
  EXPECT_FALSE(Open(p, 7, 1, /*id=*/0).direct);
  auto later = p.Join(7, 2);
  ASSERT_TRUE(later.has_value());
  EXPECT_FALSE(later->direct);
  EXPECT_EQ(later->backing_id, 0);
}

TEST(OpenPolicyTest, TwoFirstOpensRacingTheSecondJoinsTheFirstsMode) {
  OpenPolicy p(256);
  p.Start(true, false);
  EXPECT_FALSE(p.Join(7, 1).has_value());
  EXPECT_FALSE(p.Join(7, 2).has_value());  // both looked before either settled
  auto a = File(), b = File();
  EXPECT_TRUE(p.Settle(7, 1, 42, a).used);
  const OpenPolicy::Settled second = p.Settle(7, 2, 43, b);
  EXPECT_FALSE(second.used);  // the caller closes 43
  EXPECT_TRUE(second.mode.direct);
  EXPECT_EQ(second.mode.backing_id, 42);
  EXPECT_EQ(b.use_count(), 1);  // not kept

  // The same race when the first settled cached: the second is cached too.
  OpenPolicy q(256);
  q.Start(true, false);
  EXPECT_FALSE(q.Join(8, 3).has_value());
  EXPECT_FALSE(q.Join(8, 4).has_value());
  EXPECT_FALSE(q.Settle(8, 3, 0, nullptr).mode.direct);
  const OpenPolicy::Settled late = q.Settle(8, 4, 44, File());
  EXPECT_FALSE(late.used);
  EXPECT_FALSE(late.mode.direct);
}

TEST(OpenPolicyTest, TheLastReleaseInPassthroughGivesTheBackingFileBack) {
  OpenPolicy p(256);
  p.Start(true, false);
  auto file = File();
  Open(p, 7, 1, 42, file);
  Open(p, 7, 2, 0);  // joins: direct
  OpenPolicy::Released r = p.Release(7, 1);
  EXPECT_TRUE(r.known);
  EXPECT_TRUE(r.direct);
  EXPECT_FALSE(r.close_backing.has_value());  // file 2 still passes through
  r = p.Release(7, 2);
  EXPECT_TRUE(r.known);
  ASSERT_TRUE(r.close_backing.has_value());
  EXPECT_EQ(*r.close_backing, 42);
  EXPECT_EQ(r.backing, file);
  r = {};
  EXPECT_EQ(file.use_count(), 1);
  // No open file: the inode's next open is a first one again.
  EXPECT_FALSE(p.Join(7, 3).has_value());
}

TEST(OpenPolicyTest, ACachedReleaseClosesNoBackingAndAnUnknownOneChangesNothing) {
  OpenPolicy p(256);
  p.Start(true, false);
  Open(p, 7, 1, 0);
  const OpenPolicy::Released cached = p.Release(7, 1);
  EXPECT_TRUE(cached.known);
  EXPECT_FALSE(cached.direct);
  EXPECT_FALSE(cached.close_backing.has_value());
  EXPECT_FALSE(p.Release(7, 1).known);  // twice
  EXPECT_FALSE(p.Release(9, 99).known);
}

TEST(OpenPolicyTest, NothingIsDecidedBeforeDecideAfterOpens) {
  OpenPolicy p(4);
  p.Start(true, true);
  for (uint64_t i = 1; i <= 3; ++i) Open(p, 100 + i, i, 0, nullptr, /*large=*/false);
  const Decision d = p.Decide();
  EXPECT_EQ(d.kind, Decision::kNotYet);
  EXPECT_EQ(d.opens, 3u);
  EXPECT_TRUE(p.deciding());
  EXPECT_FALSE(p.no_open());
}

TEST(OpenPolicyTest, OneLargeOpenInAHundredKeepsOpensAnsweredForGood) {
  OpenPolicy p(100);
  p.Start(true, true);
  Open(p, 1, 1, 0, nullptr, /*large=*/true);
  for (uint64_t i = 2; i <= 100; ++i) Open(p, i, i, 0, nullptr, /*large=*/false);
  const Decision d = p.Decide();
  EXPECT_EQ(d.kind, Decision::kPassthrough);
  EXPECT_EQ(d.opens, 100u);
  EXPECT_EQ(d.large_opens, 1u);
  EXPECT_FALSE(p.deciding());
  EXPECT_FALSE(p.no_open());
  EXPECT_EQ(p.Decide().kind, Decision::kNotYet);  // decided once
  // Passthrough goes on.
  EXPECT_TRUE(Open(p, 500, 500, 42, File()).direct);
  // Opens are no longer counted.
  Open(p, 501, 501, 0, nullptr, false);
  EXPECT_EQ(p.Decide().opens, 100u);
}

TEST(OpenPolicyTest, ASmallFileWorkloadWithNothingInPassthroughTurnsToNoOpen) {
  OpenPolicy p(101);
  p.Start(true, true);
  Open(p, 1, 1, 0, nullptr, /*large=*/true);
  for (uint64_t i = 2; i <= 101; ++i) Open(p, i, i, 0, nullptr, /*large=*/false);
  const Decision d = p.Decide();  // 1 in 101: under 1 in 100
  EXPECT_EQ(d.kind, Decision::kNoOpen);
  EXPECT_EQ(d.direct_opens, 0u);
  EXPECT_TRUE(p.no_open());
  EXPECT_FALSE(p.deciding());
}

TEST(OpenPolicyTest, ASmallFileWorkloadWaitsForTheFilesInPassthroughToClose) {
  OpenPolicy p(4);
  p.Start(true, true);
  auto file = File();
  EXPECT_TRUE(Open(p, 7, 1, 42, file, /*large=*/false).direct);
  for (uint64_t i = 2; i <= 4; ++i) Open(p, 100 + i, i, 0, nullptr, /*large=*/false);
  const Decision d = p.Decide();
  EXPECT_EQ(d.kind, Decision::kNoOpenLater);
  EXPECT_EQ(d.direct_opens, 1u);
  EXPECT_FALSE(p.no_open());
  // Passthrough is over: a new inode does not pass through even when the
  // kernel took its file (the caller closes that id)...
  const OpenPolicy::Settled other = [&] {
    EXPECT_FALSE(p.Join(8, 5).has_value());
    return p.Settle(8, 5, 43, File());
  }();
  EXPECT_FALSE(other.used);
  EXPECT_FALSE(other.mode.direct);
  // ... but an open of the inode still in passthrough joins it.
  EXPECT_TRUE(p.Join(7, 6)->direct);
  EXPECT_FALSE(p.Release(8, 5).now_no_open);  // cached: changes nothing
  EXPECT_FALSE(p.Release(7, 1).now_no_open);  // fh 6 still passes through
  EXPECT_FALSE(p.no_open());
  const OpenPolicy::Released last = p.Release(7, 6);
  EXPECT_TRUE(last.now_no_open);
  EXPECT_TRUE(p.no_open());
  EXPECT_EQ(*last.close_backing, 42);
}

TEST(OpenPolicyTest, OpensAreCountedOnlyWhileDeciding) {
  OpenPolicy p(2);
  p.Start(true, false);  // nothing to decide
  p.Count(true);
  p.Count(false);
  EXPECT_EQ(p.Decide().opens, 0u);
  OpenPolicy q(2);
  q.Start(true, true);
  q.Count(true);
  q.Count(false);
  const Decision d = q.Decide();
  EXPECT_EQ(d.opens, 2u);
  EXPECT_EQ(d.large_opens, 1u);
}

TEST(OpenPolicyTest, TheSuccessorGetsTheModesTheBackingIdsAndTheDecisionState) {
  OpenPolicy before(256);
  before.Start(true, true);
  Open(before, 7, 1, 42, File());                   // direct
  Open(before, 7, 2, 0);                            // joins: direct
  Open(before, 8, 3, 0, nullptr, /*large=*/false);  // cached
  SessionState s;
  s.passthrough_agreed = true;
  s.files = {{1, 7, "/a", {}, false}, {2, 7, "/a", {}, false}, {3, 8, "/b", {}, true}};
  before.Save(&s);
  EXPECT_TRUE(s.files[0].direct);
  EXPECT_TRUE(s.files[1].direct);
  EXPECT_FALSE(s.files[2].direct);
  ASSERT_EQ(s.backings.size(), 1u);  // inode 8 is cached: none
  EXPECT_EQ(s.backings[0].ino, 7u);
  EXPECT_EQ(s.backings[0].id, 42);
  EXPECT_TRUE(s.deciding);
  EXPECT_FALSE(s.no_open);
  EXPECT_FALSE(s.no_passthrough);
  EXPECT_EQ(s.opens, 2u);
  EXPECT_EQ(s.large_opens, 1u);

  OpenPolicy after(256);
  after.Start(true, false);  // the replayed INIT; the saved state overrides it
  auto held = File();
  after.Restore(s, {{7, held}});
  EXPECT_TRUE(after.deciding());
  EXPECT_EQ(after.Decide().opens, 2u);
  EXPECT_TRUE(after.Join(7, 4)->direct);
  EXPECT_EQ(after.Join(7, 5)->backing_id, 42);
  EXPECT_FALSE(after.Join(8, 6)->direct);
  for (uint64_t fh : {1, 2, 4}) EXPECT_FALSE(after.Release(7, fh).close_backing.has_value());
  const OpenPolicy::Released last = after.Release(7, 5);
  EXPECT_EQ(*last.close_backing, 42);
  EXPECT_EQ(last.backing, held);
}

TEST(OpenPolicyTest, WithoutPassthroughAgreedTheSuccessorPlacesNoFile) {
  SessionState s;
  s.passthrough_agreed = false;
  s.no_open = true;
  s.no_passthrough = true;
  s.files = {{1, 7, "/a", {}, false}};
  OpenPolicy after(256);
  after.Start(false, false);
  after.Restore(s, {});
  EXPECT_TRUE(after.no_open());
  EXPECT_FALSE(after.Release(7, 1).known);
  // no_passthrough came along: a first open does not pass through.
  EXPECT_FALSE(after.Settle(9, 2, 42, File()).used);
}

}  // namespace
}  // namespace perch::fuse
