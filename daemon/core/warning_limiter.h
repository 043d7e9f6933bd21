// WarningLimiter: lets one warning of a kind through per period and counts
// the rest (BlockReader's store failures, CacheCatalog's index failures).
#pragma once

#include <chrono>
#include <cstdint>

#include "daemon/core/clock.h"
#include "daemon/core/mutex.h"
#include "daemon/core/types.h"

namespace perch::core {

// Lets one warning through per `period` and counts the others, so that a
// failure that hits every block (a full disk) logs a line a minute, not one
// per block. Thread-safe.
class WarningLimiter {
 public:
  // `time`: what the period is measured on; outlives the limiter.
  explicit WarningLimiter(std::chrono::seconds period,
                          const TimeSource& time = TimeSource::Steady())
      : period_(period), time_(time) {}
  // True if this warning is to be logged; then `*suppressed` is how many
  // were dropped since the last one logged.
  bool Allow(uint64_t* suppressed);

 private:
  const std::chrono::seconds period_;
  const TimeSource& time_;
  Mutex mu_;
  bool logged_ PERCH_GUARDED_BY(mu_) = false;
  Clock::time_point last_ PERCH_GUARDED_BY(mu_);
  uint64_t dropped_ PERCH_GUARDED_BY(mu_) = 0;
};

}  // namespace perch::core
