// core::Mutex's condition variable (daemon/core/mutex.h): a wait lets go of the mutex and has it
// back, and WaitUntil tells a notify from its deadline.
#include "daemon/core/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace perch::core {
namespace {

struct Guarded {
  Mutex mu;
  CondVar cv;
  bool ready PERCH_GUARDED_BY(mu) = false;
  int after PERCH_GUARDED_BY(mu) = 0;
};

TEST(CondVarTest, WaitLetsGoOfTheMutexAndHasItBackOnceNotified) {
  Guarded g;
  MutexLock l(g.mu);
  // The notifier must take the mutex the waiter holds: it can only while the
  // waiter waits.
  std::thread notifier([&g] {
    MutexLock nl(g.mu);
    g.ready = true;
    g.cv.NotifyOne();
  });
  while (!g.ready) g.cv.Wait(g.mu);
  // Held again: a second thread's write waits for this scope to end.
  std::thread writer([&g] {
    MutexLock wl(g.mu);
    g.after = 2;
  });
  g.after = 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(g.after, 1);
  l.Unlock();
  writer.join();
  notifier.join();
  MutexLock again(g.mu);
  EXPECT_EQ(g.after, 2);
}

TEST(CondVarTest, WaitUntilTellsANotifyFromTheDeadline) {
  Guarded g;
  MutexLock l(g.mu);
  const auto start = std::chrono::steady_clock::now();
  // Nobody notifies: false once the deadline has passed, and not before.
  bool notified = true;
  while (notified && std::chrono::steady_clock::now() < start + std::chrono::seconds(2))
    notified = g.cv.WaitUntil(g.mu, start + std::chrono::milliseconds(30));
  EXPECT_FALSE(notified);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));

  std::thread notifier([&g] {
    MutexLock nl(g.mu);
    g.ready = true;
    g.cv.NotifyAll();
  });
  bool in_time = true;
  while (!g.ready && in_time) in_time = g.cv.WaitUntil(g.mu, start + std::chrono::seconds(30));
  EXPECT_TRUE(in_time);
  EXPECT_TRUE(g.ready);
  l.Unlock();
  notifier.join();
}

}  // namespace
}  // namespace perch::core
