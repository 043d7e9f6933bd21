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
// CondVar waits on a Mutex the caller holds (the analysis checks that it
// does); the caller waits in a loop that looks at its condition, so that the
// analysis checks the condition's reads too:
//
//   MutexLock l(mu_);
//   while (queue_.empty()) ready_.Wait(mu_);
//
// Thread-safety: Mutex is a mutex; a MutexLock belongs to one thread;
// CondVar is a condition variable.
#pragma once

#include <chrono>
#include <condition_variable>
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
  friend class CondVar;
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

// std::condition_variable over a Mutex. Every wait may also return
// spuriously.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Lets go of `mu` until notified, then takes it again.
  void Wait(Mutex& mu) PERCH_REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu.mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();  // still held: the caller's
  }
  // As Wait, or until `due` (steady clock): false if it returned because
  // `due` had passed.
  bool WaitUntil(Mutex& mu, std::chrono::steady_clock::time_point due) PERCH_REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu.mu_, std::adopt_lock);
    const bool notified = cv_.wait_until(l, due) == std::cv_status::no_timeout;
    l.release();
    return notified;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace perch::core
