#include "daemon/core/clock.h"

namespace perch::core {
namespace {

class SteadyTimeSource final : public TimeSource {
 public:
  Clock::time_point Now() const override { return Clock::now(); }
  void WaitUntil(CondVar& cv, Mutex& mu, Clock::time_point due) const PERCH_REQUIRES(mu) override {
    cv.WaitUntil(mu, due);
  }
};

}  // namespace

const TimeSource& TimeSource::Steady() {
  static const SteadyTimeSource steady;
  return steady;
}

}  // namespace perch::core
