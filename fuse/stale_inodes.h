// StaleInodes: files whose object changed at the origin while the kernel
// held pages of the old version.
//
// The kernel keeps a file's pages across opens (keep_cache; no-open), so
// after perch finds an object replaced (core::VersionGuard, a read answered
// ESTALE) a later read could take its first pages from the kernel's page
// cache (old version) and the rest from perch (new version). So the inode is
// marked: every read of it is answered ESTALE until the kernel has dropped
// its pages and attributes (fuse_lowlevel_notify_inval_inode, done here on a
// thread of its own, since the notification must not run in the path of a
// request that may hold the pages it waits for). From then on reads of it
// are of the new version only.
//
// Thread-safety: all methods from any thread. Stop before the session goes.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <thread>

#include "daemon/core/mutex.h"

namespace perch::fuse {

class StaleInodes {
 public:
  // `invalidate(ino)` drops the kernel's pages and attributes of `ino`.
  explicit StaleInodes(std::function<void(uint64_t ino)> invalidate);
  ~StaleInodes();  // Stop()
  StaleInodes(const StaleInodes&) = delete;
  StaleInodes& operator=(const StaleInodes&) = delete;

  // `ino`'s object is gone: reads of it fail until it is invalidated.
  void Mark(uint64_t ino);
  bool Contains(uint64_t ino) const;
  // Invalidates what is marked, then ends the thread; later marks are
  // dropped. Idempotent.
  void Stop();

 private:
  void Loop();

  const std::function<void(uint64_t)> invalidate_;
  mutable core::Mutex mu_;
  core::CondVar cv_;  // queue_ grew, or stopping_
  std::set<uint64_t> marked_ PERCH_GUARDED_BY(mu_);
  std::atomic<size_t> marked_count_{0};  // marked_.size(): reads skip mu_ while it is 0
  std::deque<uint64_t> queue_ PERCH_GUARDED_BY(mu_);  // marked, not yet invalidated
  bool stopping_ PERCH_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace perch::fuse
