// WarningLimiter: lets one warning of a kind through per period and counts
// the rest (BlockReader's store failures, CacheCatalog's index failures).
#pragma once

#include <chrono>
#include <cstdint>

#include "daemon/core/mutex.h"
#include "daemon/core/types.h"

namespace perch::core {

// Lets one warning through per `period` and counts the others, so that a
// failure that hits every block (a full disk) logs a line a minute, not one
// per block. Thread-safe.
class WarningLimiter {
 public:
  explicit WarningLimiter(std::chrono::seconds period) : period_(period) {}
  // True if this warning is to be logged; then `*suppressed` is how many
  // were dropped since the last one logged.
  bool Allow(uint64_t* suppressed);

 private:
  const std::chrono::seconds period_;
  Mutex mu_;
  bool logged_ PERCH_GUARDED_BY(mu_) = false;
  Clock::time_point last_ PERCH_GUARDED_BY(mu_);
  uint64_t dropped_ PERCH_GUARDED_BY(mu_) = 0;
};

}  // namespace perch::core
