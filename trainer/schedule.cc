#include "trainer/schedule.h"

#include <algorithm>
#include <cmath>

namespace perch::trainer {

double Schedule::At(int64_t step) const {
  if (step < warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  const int64_t after = step - warmup_steps;
  if (kind == Kind::kStep) {
    return base_lr * std::pow(gamma, static_cast<double>(after / std::max<int64_t>(1, step_size)));
  }
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double t = std::min(1.0, static_cast<double>(after) / static_cast<double>(span));
  return base_lr * 0.5 * (1.0 + std::cos(M_PI * t));
}

}  // namespace perch::trainer
