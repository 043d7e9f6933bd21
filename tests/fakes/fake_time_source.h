// FakeTimeSource: a TimeSource whose time moves only when the test says
// (Advance), so that a test of a grace or a period runs in no time and never
// depends on how fast the machine is.
//
// A thread waiting in WaitUntil is woken by Advance (at once, whatever the
// due time: it looks at Now() again). Advance does not wait for what the
// woken threads then do: a test waits for that on the component's own
// signal.
//
// REQUIRES: no mutex or condition variable a thread waits with here is
// destroyed while Advance runs. Thread-safe otherwise.
#pragma once

#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <vector>

#include "daemon/core/clock.h"

namespace perch::testing {

class FakeTimeSource : public core::TimeSource {
 public:
  core::Clock::time_point Now() const override {
    std::lock_guard<std::mutex> l(mu_);
    return now_;
  }

  void Advance(std::chrono::nanoseconds by) {
    std::vector<Waiter> wake;
    {
      std::lock_guard<std::mutex> l(mu_);
      now_ += std::chrono::duration_cast<core::Clock::duration>(by);
      wake.assign(waiters_.begin(), waiters_.end());
    }
    // A waiter holds its mutex from its look at Now() until it sleeps on its
    // condition variable: taking that mutex here means the notify below
    // reaches it asleep, or it looks after the new time. Not under mu_ (a
    // waiter takes its mutex, then mu_).
    for (const Waiter& w : wake) {
      { std::lock_guard<std::mutex> sync(*w.mu); }
      w.cv->notify_all();
    }
  }

  void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 core::Clock::time_point due) const override {
    std::list<Waiter>::iterator me;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (now_ >= due) return;
      me = waiters_.insert(waiters_.end(), Waiter{&cv, lock.mutex()});
    }
    cv.wait(lock);
    std::lock_guard<std::mutex> l(mu_);
    waiters_.erase(me);
  }

 private:
  struct Waiter {
    std::condition_variable* cv;
    std::mutex* mu;
  };
  mutable std::mutex mu_;
  // Not the epoch: a time some way on, as a steady clock's is.
  core::Clock::time_point now_ = core::Clock::time_point(std::chrono::hours(1000));
  mutable std::list<Waiter> waiters_;
};

}  // namespace perch::testing
