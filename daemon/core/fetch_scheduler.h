// FetchScheduler: the one queue every block fetch goes through.
//
// Design. WAN latency makes a cold read of small files latency-bound: at
// 20-50 ms a GET, feeding a GPU takes ~100 requests in flight (Little's law),
// so the budget is large (hundreds of requests, a byte cap for big blocks).
// But not every fetch is equally urgent. A reader blocked in read() waits on
// a *demand* fetch; a trainer's announced order (*hint*) is needed soon; a
// *warm* is wanted before a job starts; *speculative* prefetch (read-ahead,
// a directory's siblings) may be wrong. The scheduler admits fetches in that
// order, and background classes (everything but demand) together may use only
// `background_share` of the request budget, so a demand read never waits
// behind a wall of prefetch: it takes the next free slot, and slots are
// reserved for it. Within a class, flows (a namespace, a warm job, a trainer)
// take turns round-robin, so one job cannot starve another.
//
// A queued fetch can be cancelled (a prefetch whose reader went away) or
// boosted to a more urgent class (a reader now waits on a block that was
// only being prefetched). A fetch in flight runs to completion.
//
// Thread-safety: all methods are safe from any thread. `start` callbacks run
// on the thread of the Submit or Release that admitted them, never under the
// scheduler's lock; they must not block.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <unordered_map>

#include "daemon/core/defaults.h"
#include "daemon/core/mutex.h"

namespace perch::core {

enum class Priority { kDemand = 0, kHint = 1, kWarm = 2, kSpeculative = 3 };
inline constexpr size_t kPriorityCount = 4;
const char* ToString(Priority p);

struct SchedulerOptions {
  size_t max_requests = kDefaultMaxRequestsInFlight;  // fetches in flight, all classes
  uint64_t max_bytes = 1ULL << 30;                    // bytes in flight, all classes
  double background_share = 0.75;  // of both budgets, for non-demand classes together
};

struct SchedulerStats {
  size_t in_flight = 0;
  uint64_t bytes_in_flight = 0;
  size_t max_in_flight_seen = 0;
  std::array<size_t, kPriorityCount> queued{};
  std::array<uint64_t, kPriorityCount> started{};
  uint64_t cancelled = 0;
  uint64_t boosted = 0;
};

class FetchScheduler {
 public:
  // Called once the fetch may run; it must call `release` exactly once when
  // the fetch is over (from any thread).
  using StartFn = std::function<void(std::function<void()> release)>;

  explicit FetchScheduler(SchedulerOptions options);
  FetchScheduler(const FetchScheduler&) = delete;
  FetchScheduler& operator=(const FetchScheduler&) = delete;

  // Queues a fetch of `bytes` bytes and returns its ticket; may start it
  // (call `start`) before returning.
  uint64_t Submit(Priority priority, const std::string& flow, uint64_t bytes, StartFn start);

  // Removes a queued fetch; false if it already started (or never existed).
  bool Cancel(uint64_t ticket);

  // Moves a queued fetch to `priority` if that is more urgent than its own.
  void Boost(uint64_t ticket, Priority priority);

  SchedulerStats Stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Task {
    Priority priority;
    std::string flow;
    uint64_t bytes = 0;
    StartFn start;
  };
  // One class's queue: flows in round-robin order, each with its tickets in order.
  struct ClassQueue {
    std::map<std::string, std::deque<uint64_t>> flows;
    std::list<std::string> turn;  // flows with queued tickets, next first
    size_t size = 0;
  };

  void Enqueue(uint64_t ticket, const Task& t) PERCH_REQUIRES(mu_);
  void Dequeue(uint64_t ticket, const Task& t) PERCH_REQUIRES(mu_);
  bool Admissible(const Task& t) const PERCH_REQUIRES(mu_);
  // Takes every task that may start now out of the queues.
  std::vector<std::pair<uint64_t, StartFn>> TakeRunnable() PERCH_REQUIRES(mu_);
  void Run(std::vector<std::pair<uint64_t, StartFn>> runnable) PERCH_EXCLUDES(mu_);
  void Release(uint64_t ticket);

  const SchedulerOptions options_;

  mutable Mutex mu_;
  uint64_t next_ticket_ PERCH_GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, Task> queued_ PERCH_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Task> running_ PERCH_GUARDED_BY(mu_);  // start dropped
  std::array<ClassQueue, kPriorityCount> classes_ PERCH_GUARDED_BY(mu_);
  size_t in_flight_ PERCH_GUARDED_BY(mu_) = 0;
  size_t background_in_flight_ PERCH_GUARDED_BY(mu_) = 0;
  uint64_t bytes_in_flight_ PERCH_GUARDED_BY(mu_) = 0;
  uint64_t background_bytes_ PERCH_GUARDED_BY(mu_) = 0;
  SchedulerStats stats_ PERCH_GUARDED_BY(mu_);  // counters
};

}  // namespace perch::core
