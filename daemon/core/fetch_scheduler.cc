#include "daemon/core/fetch_scheduler.h"

#include <algorithm>
#include <vector>

#include "daemon/core/mutex.h"

namespace perch::core {

const char* ToString(Priority p) {
  switch (p) {
    case Priority::kDemand:
      return "demand";
    case Priority::kHint:
      return "hint";
    case Priority::kWarm:
      return "warm";
    case Priority::kSpeculative:
      return "speculative";
  }
  return "unknown";
}

FetchScheduler::FetchScheduler(SchedulerOptions options) : options_(options) {}

void FetchScheduler::Enqueue(uint64_t ticket, const Task& t) {
  ClassQueue& q = classes_[static_cast<size_t>(t.priority)];
  auto& flow = q.flows[t.flow];
  if (flow.empty()) q.turn.push_back(t.flow);
  flow.push_back(ticket);
  q.size++;
  stats_.queued[static_cast<size_t>(t.priority)]++;
}

void FetchScheduler::Dequeue(uint64_t ticket, const Task& t) {
  ClassQueue& q = classes_[static_cast<size_t>(t.priority)];
  auto it = q.flows.find(t.flow);
  if (it == q.flows.end()) return;
  auto pos = std::find(it->second.begin(), it->second.end(), ticket);
  if (pos == it->second.end()) return;
  it->second.erase(pos);
  q.size--;
  stats_.queued[static_cast<size_t>(t.priority)]--;
  if (it->second.empty()) {
    q.flows.erase(it);
    q.turn.remove(t.flow);
  }
}

bool FetchScheduler::Admissible(const Task& t) const {
  if (in_flight_ >= options_.max_requests) return false;
  if (in_flight_ > 0 && bytes_in_flight_ + t.bytes > options_.max_bytes) return false;
  if (t.priority == Priority::kDemand) return true;
  const auto share_requests = std::max<size_t>(
      1,
      static_cast<size_t>(static_cast<double>(options_.max_requests) * options_.background_share));
  const auto share_bytes =
      static_cast<uint64_t>(static_cast<double>(options_.max_bytes) * options_.background_share);
  if (background_in_flight_ >= share_requests) return false;
  if (background_in_flight_ > 0 && background_bytes_ + t.bytes > share_bytes) return false;
  return true;
}

std::vector<std::pair<uint64_t, FetchScheduler::StartFn>> FetchScheduler::TakeRunnable() {
  std::vector<std::pair<uint64_t, StartFn>> out;
  for (ClassQueue& q : classes_) {
    while (q.size > 0) {
      const std::string flow = q.turn.front();
      auto& tickets = q.flows[flow];
      const uint64_t ticket = tickets.front();
      auto it = queued_.find(ticket);
      // Strict priority: when the most urgent waiting fetch cannot start, nothing behind it may.
      if (!Admissible(it->second)) return out;
      Task task = std::move(it->second);
      queued_.erase(it);
      tickets.pop_front();
      q.size--;
      q.turn.pop_front();
      if (tickets.empty()) {
        q.flows.erase(flow);
      } else {
        q.turn.push_back(flow);  // its next fetch waits for the other flows' turns
      }
      const auto cls = static_cast<size_t>(task.priority);
      stats_.queued[cls]--;
      stats_.started[cls]++;
      in_flight_++;
      bytes_in_flight_ += task.bytes;
      if (task.priority != Priority::kDemand) {
        background_in_flight_++;
        background_bytes_ += task.bytes;
      }
      stats_.max_in_flight_seen = std::max(stats_.max_in_flight_seen, in_flight_);
      StartFn start = std::move(task.start);
      task.start = nullptr;
      running_.emplace(ticket, std::move(task));
      out.emplace_back(ticket, std::move(start));
    }
  }
  return out;
}

void FetchScheduler::Run(std::vector<std::pair<uint64_t, StartFn>> runnable) {
  for (auto& [ticket, start] : runnable) {
    start([this, ticket = ticket] { Release(ticket); });
  }
}

uint64_t FetchScheduler::Submit(Priority priority, const std::string& flow, uint64_t bytes,
                                StartFn start) {
  uint64_t ticket;
  std::vector<std::pair<uint64_t, StartFn>> runnable;
  {
    MutexLock l(mu_);
    ticket = next_ticket_++;
    Task t{priority, flow, bytes, std::move(start)};
    Enqueue(ticket, t);
    queued_.emplace(ticket, std::move(t));
    runnable = TakeRunnable();
  }
  Run(std::move(runnable));
  return ticket;
}

void FetchScheduler::Release(uint64_t ticket) {
  std::vector<std::pair<uint64_t, StartFn>> runnable;
  {
    MutexLock l(mu_);
    auto it = running_.find(ticket);
    if (it == running_.end()) return;  // released twice: ignore
    in_flight_--;
    bytes_in_flight_ -= it->second.bytes;
    if (it->second.priority != Priority::kDemand) {
      background_in_flight_--;
      background_bytes_ -= it->second.bytes;
    }
    running_.erase(it);
    runnable = TakeRunnable();
  }
  Run(std::move(runnable));
}

bool FetchScheduler::Cancel(uint64_t ticket) {
  MutexLock l(mu_);
  auto it = queued_.find(ticket);
  if (it == queued_.end()) return false;
  Dequeue(ticket, it->second);
  queued_.erase(it);
  stats_.cancelled++;
  return true;
}

void FetchScheduler::Boost(uint64_t ticket, Priority priority) {
  std::vector<std::pair<uint64_t, StartFn>> runnable;
  {
    MutexLock l(mu_);
    auto it = queued_.find(ticket);
    if (it == queued_.end() || it->second.priority <= priority) return;
    Dequeue(ticket, it->second);
    it->second.priority = priority;
    Enqueue(ticket, it->second);
    stats_.boosted++;
    runnable = TakeRunnable();  // demand may fit where background did not
  }
  Run(std::move(runnable));
}

SchedulerStats FetchScheduler::Stats() const {
  MutexLock l(mu_);
  SchedulerStats s = stats_;
  s.in_flight = in_flight_;
  s.bytes_in_flight = bytes_in_flight_;
  return s;
}

}  // namespace perch::core
