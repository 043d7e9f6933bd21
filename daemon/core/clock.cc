#include "daemon/core/clock.h"

namespace perch::core {
namespace {

class SteadyTimeSource final : public TimeSource {
 public:
  Clock::time_point Now() const override { return Clock::now(); }
  void WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 Clock::time_point due) const override {
    cv.wait_until(lock, due);
  }
};

}  // namespace

const TimeSource& TimeSource::Steady() {
  static const SteadyTimeSource steady;
  return steady;
}

}  // namespace perch::core
