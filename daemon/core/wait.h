// WaitFor: turns a callback API into a blocking call with a deadline. The
// callback may run after WaitFor gave up; its result is then dropped.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "daemon/core/mutex.h"
#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::core {

// How long past its deadline a caller waits for an answer before it gives up
// on it (the callee's own deadline handling gets this long to answer first).
inline constexpr std::chrono::seconds kAnswerSlack{1};

template <typename T, typename Call>
Result<T> WaitFor(Deadline deadline, Call call) {
  struct Slot {
    Mutex mu;
    CondVar cv;
    std::optional<Result<T>> value PERCH_GUARDED_BY(mu);
  };
  auto slot = std::make_shared<Slot>();
  call([slot](Result<T> r) {
    MutexLock l(slot->mu);
    slot->value.emplace(std::move(r));
    slot->cv.NotifyAll();
  });
  MutexLock l(slot->mu);
  while (!slot->value.has_value()) {
    if (!slot->cv.WaitUntil(slot->mu, deadline + kAnswerSlack) && !slot->value.has_value()) {
      return DeadlineExceededError("no answer before the deadline");
    }
  }
  return std::move(*slot->value);
}

}  // namespace perch::core
