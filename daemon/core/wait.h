// WaitFor: turns a callback API into a blocking call with a deadline. The
// callback may run after WaitFor gave up; its result is then dropped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::core {

// How long past its deadline a caller waits for an answer before it gives up
// on it (the callee's own deadline handling gets this long to answer first).
inline constexpr std::chrono::seconds kAnswerSlack{1};

template <typename T, typename Call>
Result<T> WaitFor(Deadline deadline, Call call) {
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<T>> value;
  };
  auto slot = std::make_shared<Slot>();
  call([slot](Result<T> r) {
    std::lock_guard<std::mutex> l(slot->mu);
    slot->value.emplace(std::move(r));
    slot->cv.notify_all();
  });
  std::unique_lock<std::mutex> l(slot->mu);
  if (!slot->cv.wait_until(l, deadline + kAnswerSlack, [&] { return slot->value.has_value(); })) {
    return DeadlineExceededError("no answer before the deadline");
  }
  return std::move(*slot->value);
}

}  // namespace perch::core
