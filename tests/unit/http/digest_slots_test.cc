#include "daemon/http/digest_slots.h"

#include <gtest/gtest.h>

#include <vector>

namespace perch::http {
namespace digest_slots_test {

// Acquires a slot for `key`, noting in `ran` when its turn came.
void Ask(DigestSlots& slots, const DigestSlots::Key& key, std::vector<int>& ran, int id) {
  slots.Acquire(key, [&ran, id] { ran.push_back(id); });
}

TEST(DigestSlotsTest, OneRequestAtATimeAtAServerWhateverItsNamespace) {
  DigestSlots slots(3, 1);
  std::vector<int> ran;
  Ask(slots, {"/a", "http://cache1"}, ran, 1);
  Ask(slots, {"/b", "http://cache1"}, ran, 2);  // another namespace, the same server
  Ask(slots, {"/a", "http://cache1"}, ran, 3);
  EXPECT_EQ(ran, (std::vector<int>{1}));
  EXPECT_EQ(slots.InFlightAt("http://cache1"), 1u);
  slots.Release({"/a", "http://cache1"});
  EXPECT_EQ(ran, (std::vector<int>{1, 3}));  // its own namespace's waiter first
  slots.Release({"/a", "http://cache1"});
  EXPECT_EQ(ran, (std::vector<int>{1, 3, 2}));
  slots.Release({"/b", "http://cache1"});
  EXPECT_EQ(slots.InFlightAt("http://cache1"), 0u);
  EXPECT_EQ(slots.InFlight("/a"), 0u);
}

TEST(DigestSlotsTest, ANamespaceCountsEveryServerItsOriginRelaysFor) {
  DigestSlots slots(2, 1);
  std::vector<int> ran;
  Ask(slots, {"/a", "http://cache1"}, ran, 1);
  Ask(slots, {"/a", "http://cache2"}, ran, 2);
  Ask(slots, {"/a", "http://origin"}, ran, 3);  // free server, but the origin has 2 already
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_EQ(slots.InFlight("/a"), 2u);
  slots.Release({"/a", "http://cache1"});
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(slots.InFlight("/a"), 2u);
}

TEST(DigestSlotsTest, AWaiterForABusyServerDoesNotHoldBackOneForAFreeServer) {
  DigestSlots slots(2, 1);
  std::vector<int> ran;
  Ask(slots, {"/a", "http://cache1"}, ran, 1);
  Ask(slots, {"/a", "http://cache2"}, ran, 2);
  Ask(slots, {"/a", "http://cache1"}, ran, 3);  // waits for cache1
  Ask(slots, {"/a", "http://cache2"}, ran, 4);  // waits for cache2
  slots.Release({"/a", "http://cache2"});
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 4}));
  slots.Release({"/a", "http://cache1"});
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 4, 3}));
}

}  // namespace digest_slots_test
}  // namespace perch::http
