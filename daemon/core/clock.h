// TimeSource: where core and the store read the time and wait for it, so that
// a test moves time on instead of sleeping [LevelDB Env::NowMicros; Envoy
// TimeSource]. The daemon passes TimeSource::Steady(); tests pass a
// FakeTimeSource (tests/fakes/fake_time_source.h) and call Advance().
//
// Only what decides by elapsed time takes one (a grace before freeing bytes,
// a warning let through once a period). Deadlines of requests handed to
// libcurl stay on the real clock (core::Clock in types.h): the network does
// not run on a fake clock.
//
// Thread-safety: every method is safe from any thread.
#pragma once

#include "daemon/core/mutex.h"
#include "daemon/core/types.h"

namespace perch::core {

class TimeSource {
 public:
  virtual ~TimeSource() = default;

  // The time now, monotonic.
  virtual Clock::time_point Now() const = 0;

  // As cv.WaitUntil(mu, due), on this source's time: returns once `cv` is
  // notified, once Now() has reached `due`, or spuriously, so the caller
  // waits in a loop that looks at its condition and at Now() again.
  // REQUIRES: whoever notifies `cv` does so after changing what the caller
  // waits for under `mu`.
  virtual void WaitUntil(CondVar& cv, Mutex& mu, Clock::time_point due) const
      PERCH_REQUIRES(mu) = 0;

  // The steady clock (std::chrono::steady_clock), one for the process.
  static const TimeSource& Steady();
};

}  // namespace perch::core
