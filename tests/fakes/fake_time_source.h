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
#include <list>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/mutex.h"

namespace perch::testing {

class FakeTimeSource : public core::TimeSource {
 public:
  core::Clock::time_point Now() const override {
    core::MutexLock l(mu_);
    return now_;
  }

  void Advance(std::chrono::nanoseconds by) {
    std::vector<Waiter> wake;
    {
      core::MutexLock l(mu_);
      now_ += std::chrono::duration_cast<core::Clock::duration>(by);
      wake.assign(waiters_.begin(), waiters_.end());
    }
    // A waiter holds its mutex from its look at Now() until it sleeps on its
    // condition variable: taking that mutex here means the notify below
    // reaches it asleep, or it looks after the new time. Not under mu_ (a
    // waiter takes its mutex, then mu_).
    for (const Waiter& w : wake) {
      { core::MutexLock sync(*w.mu); }
      w.cv->NotifyAll();
    }
  }

  void WaitUntil(core::CondVar& cv, core::Mutex& mu, core::Clock::time_point due) const
      PERCH_REQUIRES(mu) override {
    std::list<Waiter>::iterator me;
    {
      core::MutexLock l(mu_);
      if (now_ >= due) return;
      me = waiters_.insert(waiters_.end(), Waiter{&cv, &mu});
    }
    cv.Wait(mu);
    core::MutexLock l(mu_);
    waiters_.erase(me);
  }

 private:
  struct Waiter {
    core::CondVar* cv;
    core::Mutex* mu;
  };
  // Lock order: a waiter's mutex, then mu_.
  mutable core::Mutex mu_;
  // Not the epoch: a time some way on, as a steady clock's is.
  core::Clock::time_point now_ PERCH_GUARDED_BY(mu_) =
      core::Clock::time_point(std::chrono::hours(1000));
  mutable std::list<Waiter> waiters_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::testing
