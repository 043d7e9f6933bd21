#include "fuse/stale_inodes.h"

#include <utility>

namespace perch::fuse {

StaleInodes::StaleInodes(std::function<void(uint64_t)> invalidate)
    : invalidate_(std::move(invalidate)), thread_([this] { Loop(); }) {}

StaleInodes::~StaleInodes() { Stop(); }

void StaleInodes::Mark(uint64_t ino) {
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_ || !marked_.insert(ino).second) return;
  marked_count_.store(marked_.size());
  queue_.push_back(ino);
  cv_.notify_one();
}

bool StaleInodes::Contains(uint64_t ino) const {
  if (marked_count_.load() == 0) return false;  // every read asks: no lock while none is marked
  std::lock_guard<std::mutex> l(mu_);
  return marked_.count(ino) > 0;
}

void StaleInodes::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

void StaleInodes::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    uint64_t ino = queue_.front();
    queue_.pop_front();
    l.unlock();
    invalidate_(ino);
    l.lock();
    marked_.erase(ino);
    marked_count_.store(marked_.size());
  }
}

}  // namespace perch::fuse
