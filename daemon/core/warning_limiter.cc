#include "daemon/core/warning_limiter.h"

namespace perch::core {

bool WarningLimiter::Allow(uint64_t* suppressed) {
  MutexLock l(mu_);
  const Clock::time_point now = time_.Now();
  if (logged_ && now - last_ < period_) {
    dropped_++;
    return false;
  }
  logged_ = true;
  last_ = now;
  *suppressed = dropped_;
  dropped_ = 0;
  return true;
}

}  // namespace perch::core
