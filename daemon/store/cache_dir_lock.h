// CacheDirLock: one perchd per cache directory. An exclusive flock on
// <root>/lock, held for the daemon's life, with the holder's pid inside so
// the second daemon can say who has it.
//
// Thread-safety: a value type; not shared between threads.
#pragma once

#include <string>

#include "daemon/core/result.h"

namespace perch::store {

class CacheDirLock {
 public:
  // Creates `root` if missing, sets its mode to 0700 and locks it. kUnavailable naming the
  // holder's pid if another process has it; kInternal for other errors.
  static core::Result<CacheDirLock> Acquire(const std::string& root);

  CacheDirLock(CacheDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  CacheDirLock& operator=(CacheDirLock&& other) noexcept;
  CacheDirLock(const CacheDirLock&) = delete;
  CacheDirLock& operator=(const CacheDirLock&) = delete;
  ~CacheDirLock();

 private:
  explicit CacheDirLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace perch::store
