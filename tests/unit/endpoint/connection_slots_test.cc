// The endpoint's share of connections per peer uid (issue 29): one owner
// past its share is refused while the others are still admitted.
#include "daemon/peers/connection_slots.h"

#include <gtest/gtest.h>

namespace perch::peers {
namespace {

using Admission = ConnectionSlots::Admission;
constexpr uid_t kNobody = 65534;

TEST(ConnectionSlotsTest, OneOwnerGetsItsShareAndTheOthersStillGetIn) {
  ConnectionSlots slots(8, 2);
  EXPECT_EQ(slots.Acquire(kNobody), Admission::kAdmitted);
  EXPECT_EQ(slots.Acquire(kNobody), Admission::kAdmitted);
  EXPECT_EQ(slots.Acquire(kNobody), Admission::kOwnerFull);
  EXPECT_EQ(slots.held_by(kNobody), 2u);              // a refusal takes nothing
  EXPECT_EQ(slots.Acquire(0), Admission::kAdmitted);  // root: an owner like the others
  EXPECT_EQ(slots.Acquire(1000), Admission::kAdmitted);
  EXPECT_EQ(slots.held(), 4u);
  slots.Release(kNobody);
  EXPECT_EQ(slots.Acquire(kNobody), Admission::kAdmitted);  // its slot is back
  EXPECT_EQ(slots.held_by(kNobody), 2u);
}

TEST(ConnectionSlotsTest, UnknownPeersShareOneOwnersShare) {
  ConnectionSlots slots(8, 2);
  EXPECT_EQ(slots.Acquire(std::nullopt), Admission::kAdmitted);
  EXPECT_EQ(slots.Acquire(std::nullopt), Admission::kAdmitted);
  EXPECT_EQ(slots.Acquire(std::nullopt), Admission::kOwnerFull);
  EXPECT_EQ(slots.held_by(std::nullopt), 2u);
  EXPECT_EQ(slots.held_by(0), 0u);  // not root's
  EXPECT_EQ(slots.Acquire(0), Admission::kAdmitted);
}

TEST(ConnectionSlotsTest, TheTotalBoundsEveryOwner) {
  ConnectionSlots slots(3, 2);
  EXPECT_EQ(slots.Acquire(1), Admission::kAdmitted);
  EXPECT_EQ(slots.Acquire(2), Admission::kAdmitted);
  EXPECT_EQ(slots.Acquire(3), Admission::kAdmitted);
  EXPECT_EQ(slots.Acquire(4), Admission::kFull);
  EXPECT_EQ(slots.Acquire(1), Admission::kFull);
  slots.Release(2);
  EXPECT_EQ(slots.Acquire(1), Admission::kAdmitted);
  EXPECT_EQ(slots.Acquire(1), Admission::kOwnerFull);  // its share, before the total
  slots.Release(1);
  slots.Release(1);
  slots.Release(3);
  EXPECT_EQ(slots.held(), 0u);
  EXPECT_EQ(slots.held_by(1), 0u);
}

TEST(ConnectionSlotsDeathTest, ReleasingWhatWasNotTakenIsABug) {
  ConnectionSlots slots(4, 1);
  EXPECT_EQ(slots.Acquire(1), Admission::kAdmitted);
  EXPECT_DEATH(slots.Release(2), "PERCH_CHECK");
  EXPECT_DEATH(ConnectionSlots(4, 0), "PERCH_CHECK");
  EXPECT_DEATH(ConnectionSlots(4, 5), "PERCH_CHECK");
}

}  // namespace
}  // namespace perch::peers
