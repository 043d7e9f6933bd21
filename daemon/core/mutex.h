// Mutex and MutexLock: std::mutex with Clang's thread-safety annotations, so
// that the compiler checks what the comments used to say. Shared state is
// declared `PERCH_GUARDED_BY(mu_)`, functions that expect the lock held
// `PERCH_REQUIRES(mu_)`; the clang build (the sanitizer build in
// ./scripts/test) has -Wthread-safety -Werror and fails on an access without
// the lock. gcc ignores the annotations.
//
//   mutable Mutex mu_;
//   std::map<K, V> items_ PERCH_GUARDED_BY(mu_);
//   void Touch() { MutexLock l(mu_); items_.clear(); }
//
// Thread-safety: Mutex is a mutex; a MutexLock belongs to one thread.
#pragma once

#include <mutex>

#if defined(__clang__)
#define PERCH_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PERCH_THREAD_ANNOTATION(x)
#endif

#define PERCH_CAPABILITY(x) PERCH_THREAD_ANNOTATION(capability(x))
#define PERCH_SCOPED_CAPABILITY PERCH_THREAD_ANNOTATION(scoped_lockable)
#define PERCH_GUARDED_BY(x) PERCH_THREAD_ANNOTATION(guarded_by(x))
#define PERCH_PT_GUARDED_BY(x) PERCH_THREAD_ANNOTATION(pt_guarded_by(x))
#define PERCH_REQUIRES(...) PERCH_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define PERCH_EXCLUDES(...) PERCH_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define PERCH_ACQUIRE(...) PERCH_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define PERCH_RELEASE(...) PERCH_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define PERCH_NO_THREAD_SAFETY_ANALYSIS PERCH_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace perch::core {

class PERCH_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() PERCH_ACQUIRE() { mu_.lock(); }
  void Unlock() PERCH_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds `mu` from construction to destruction, or until Unlock.
class PERCH_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) PERCH_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() PERCH_RELEASE() {
    if (locked_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Lets go early (e.g. before calling out); the destructor then does nothing.
  void Unlock() PERCH_RELEASE() {
    mu_.Unlock();
    locked_ = false;
  }

 private:
  Mutex& mu_;
  bool locked_ = true;
};

}  // namespace perch::core
