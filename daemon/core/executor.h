// Executor: where core components run work they must not do on the caller's
// thread (disk writes after a network completion, timers). Tests use
// InlineExecutor (runs each task at once) or QueuedExecutor (runs them when
// the test says), both in tests/fakes/mem_block_store.h; the daemon uses
// small thread pools (perchd/thread_pool_executor.h).
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
