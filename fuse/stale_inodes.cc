#include "fuse/stale_inodes.h"

#include <utility>

namespace perch::fuse {

StaleInodes::StaleInodes(std::function<void(uint64_t)> invalidate)
    : invalidate_(std::move(invalidate)), thread_([this] { Loop(); }) {}

StaleInodes::~StaleInodes() { Stop(); }

void StaleInodes::Mark(uint64_t ino) {
  core::MutexLock l(mu_);
  if (stopping_ || !marked_.insert(ino).second) return;
  marked_count_.store(marked_.size());
  queue_.push_back(ino);
  cv_.NotifyOne();
}

bool StaleInodes::Contains(uint64_t ino) const {
  if (marked_count_.load() == 0) return false;  // every read asks: no lock while none is marked
  core::MutexLock l(mu_);
  return marked_.count(ino) > 0;
}

void StaleInodes::Stop() {
  {
    core::MutexLock l(mu_);
    stopping_ = true;
    cv_.NotifyOne();
  }
  if (thread_.joinable()) thread_.join();
}

void StaleInodes::Loop() {
  for (;;) {
    uint64_t ino = 0;
    {
      core::MutexLock l(mu_);
      while (!stopping_ && queue_.empty()) cv_.Wait(mu_);
      if (queue_.empty()) return;  // stopping, nothing left
      ino = queue_.front();
      queue_.pop_front();
    }
    invalidate_(ino);
    core::MutexLock l(mu_);
    marked_.erase(ino);
    marked_count_.store(marked_.size());
  }
}

}  // namespace perch::fuse
