#include "fuse/pending_replies.h"

#include <pthread.h>

#include <vector>

namespace perch::fuse {

namespace {
constexpr std::chrono::milliseconds kIdleCheck{500};
}  // namespace

PendingReplies::PendingReplies(std::function<void(fuse_req*)> on_expire,
                               const core::TimeSource& time)
    : on_expire_(std::move(on_expire)), time_(time), thread_([this] { Loop(); }) {}

PendingReplies::~PendingReplies() { Close(); }

uint64_t PendingReplies::Add(fuse_req* req, Clock::time_point by) {
  std::vector<fuse_req*> refused;
  uint64_t token = 0;
  {
    core::MutexLock l(mu_);
    token = next_++;
    if (closed_) {
      refused.push_back(req);  // answered at once; Claim(token) finds nothing
      replying_++;
    } else {
      pending_.emplace(token, Entry{req, by});  // the loop looks within kIdleCheck
    }
  }
  if (!refused.empty()) Expire(refused);
  return token;
}

fuse_req* PendingReplies::Claim(uint64_t token) {
  core::MutexLock l(mu_);
  auto it = pending_.find(token);
  if (it == pending_.end()) return nullptr;
  fuse_req* req = it->second.req;
  pending_.erase(it);
  replying_++;
  return req;
}

void PendingReplies::Answered() {
  core::MutexLock l(mu_);
  if (--replying_ == 0 && closed_) answered_cv_.NotifyAll();  // only Close waits for it
}

void PendingReplies::Expire(const std::vector<fuse_req*>& reqs) {
  for (fuse_req* req : reqs) on_expire_(req);
  core::MutexLock l(mu_);
  replying_ -= static_cast<int>(reqs.size());
  if (replying_ == 0 && closed_) answered_cv_.NotifyAll();
}

void PendingReplies::Loop() {
  pthread_setname_np(pthread_self(), "perch-deadline");
  for (;;) {
    std::vector<fuse_req*> due;
    {
      core::MutexLock l(mu_);
      if (closed_) return;
      if (pending_.empty()) {
        // Not woken by Add: a wake-up per read that finds none pending would
        // cost more than this check (a request is answered at most kIdleCheck
        // late).
        time_.WaitUntil(cv_, mu_, time_.Now() + kIdleCheck);
        continue;
      }
      const Clock::time_point first = pending_.begin()->second.by;
      if (time_.Now() < first) {
        time_.WaitUntil(cv_, mu_, first);
        continue;
      }
      const Clock::time_point now = time_.Now();
      for (auto it = pending_.begin(); it != pending_.end() && it->second.by <= now;) {
        due.push_back(it->second.req);
        it = pending_.erase(it);
      }
      replying_ += static_cast<int>(due.size());
    }
    Expire(due);
  }
}

void PendingReplies::Close() {
  std::vector<fuse_req*> left;
  {
    core::MutexLock l(mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& [token, e] : pending_) left.push_back(e.req);
    pending_.clear();
    replying_ += static_cast<int>(left.size());
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  Expire(left);
  core::MutexLock l(mu_);
  while (replying_ != 0) answered_cv_.Wait(mu_);
}

size_t PendingReplies::pending() const {
  core::MutexLock l(mu_);
  return pending_.size();
}

bool PendingReplies::Drain(Clock::time_point deadline) {
  for (;;) {
    {
      core::MutexLock l(mu_);
      if (pending_.empty() && replying_ == 0) return true;
    }
    if (time_.Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace perch::fuse
