// Executor: where core components run work they must not do on the caller's
// thread (disk writes after a network completion, timers). Tests use
// ManualExecutor (tests/fakes/) to run tasks one by one; the daemon uses a
// small thread pool.
//
// Thread-safety: Post and PostAfter are safe from any thread. Tasks must not
// throw.
#pragma once

#include <chrono>
#include <functional>

namespace perch::core {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual void Post(std::function<void()> task) = 0;
  virtual void PostAfter(std::chrono::milliseconds delay, std::function<void()> task) = 0;
};

}  // namespace perch::core
