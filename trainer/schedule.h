// The learning-rate schedule, a pure function of the global step so that a checkpoint only needs
// the step to restore it: linear warm-up from base_lr / warmup_steps to base_lr, then cosine
// decay to 0 at total_steps (or, for kStep, base_lr * gamma^(steps after warm-up / step_size)).
#ifndef PERCH_TRAINER_SCHEDULE_H_
#define PERCH_TRAINER_SCHEDULE_H_

#include <cstdint>

namespace perch::trainer {

struct Schedule {
  enum class Kind { kCosine, kStep };
  Kind kind = Kind::kCosine;
  double base_lr = 0.1;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  int64_t step_size = 1;  // kStep: steps between decays
  double gamma = 0.1;     // kStep: decay factor

  // The learning rate of step `step` (0-based).
  double At(int64_t step) const;
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_SCHEDULE_H_
