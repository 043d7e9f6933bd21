// Passthrough: FUSE passthrough (Linux 6.9+) on libfuse 3.14, which has no
// API for it. The kernel reads a file opened this way straight from a file
// of ours (a "backing file": the cache's file of a complete object), page
// cache and read-ahead included, without a READ request or a copy through
// perchd.
//
// libfuse 3.14 lets a server bring its own I/O on the FUSE device
// (fuse_session_custom_io). Ours reads and writes as libfuse would, and
//   - notes the INIT request (does the kernel offer FUSE_PASSTHROUGH?) and
//     OPEN requests (their ids), as they are read;
//   - adds FUSE_PASSTHROUGH and a stacking depth of 1 to the INIT reply when
//     passthrough is wanted and offered;
//   - adds FOPEN_PASSTHROUGH and the backing file's id to the reply of an
//     OPEN whose handle was marked with Direct() (the reply of libfuse's
//     fuse_reply_open, fuse_open_out, has room for the id where 3.14 writes
//     zero padding).
// The layouts and numbers are the kernel's UAPI (<linux/fuse.h>, protocol
// 7.40): fuse_in_header, fuse_init_in/out, fuse_open_out, and the device's
// FUSE_DEV_IOC_BACKING_OPEN/CLOSE ioctls, which need CAP_SYS_ADMIN.
//
// The same hooks serve a handoff to the next perchd (issue 31): they keep
// the kernel's INIT argument (the successor replays it: ReplayInit), and
// they can stop every worker from reading another request while letting
// each finish the one it holds (StopReading), which libfuse's own exit does
// not: its workers drop a request read just before they see the session
// end, and the kernel never gets an answer.
//
// Installed on every session (a read and a writev as libfuse's own, and
// splice for replies); passthrough is asked for only when wanted.
//
// Thread-safety: the I/O hooks run on every FUSE worker thread; mu_ is a
// leaf lock.
#pragma once

#include <pthread.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "daemon/core/mutex.h"
#include "daemon/core/result.h"

struct fuse_session;

namespace perch::fuse {

class Passthrough {
 public:
  // Installs the hooks on `se` (after fuse_session_mount, before the loop).
  // `self` must outlive the session; libfuse hands the hooks the session's
  // userdata, which `from_userdata` turns into `self`.
  static core::Status Install(struct fuse_session* se, Passthrough* (*from_userdata)(void*));

  // What INIT told: the kernel offers passthrough (set before the init
  // callback runs), and it was agreed (set when the INIT reply goes out).
  bool offered() const { return offered_.load(std::memory_order_acquire); }
  bool agreed() const { return agreed_.load(std::memory_order_acquire); }
  // Asks for passthrough in the INIT reply (call from the init callback).
  void Want() { want_ = true; }

  // The kernel's INIT argument (fuse_init_in) as it arrived ("" before INIT).
  std::string init() const;
  // Feeds `se` (a session adopted on another perchd's /dev/fuse descriptor,
  // hooks installed) the INIT the kernel sent that perchd, so that libfuse
  // and the init callback settle what the kernel holds; the reply is not
  // written (the kernel has had one). Then passthrough is agreed as it was.
  // REQUIRES: before the session's loop starts.
  void ReplayInit(struct fuse_session* se, const std::string& init, bool agreed);

  // Stops the workers of this session from reading requests: each finishes
  // the request it holds (its reply sent, or handed to PendingReplies) and
  // then waits in the read hook. `wake` interrupts a worker blocked in
  // read(2) (a signal without SA_RESTART to that thread). True once every
  // worker waits, false if some still processed a request at `deadline`.
  bool StopReading(const std::function<void(pthread_t)>& wake,
                   std::chrono::steady_clock::time_point deadline);
  // After StopReading: the waiting workers read again (the handoff was
  // called off)...
  void ResumeReading();
  // ... or, once the session is marked exited (fuse_session_exit), return
  // from the hook with EINTR, and libfuse ends them.
  void EndReading();

  // Registers open file `fd` with the kernel as a backing file; its id, or
  // an error (no CAP_SYS_ADMIN, a file the kernel will not stack on).
  core::Result<int32_t> OpenBacking(int device_fd, int fd);
  void CloseBacking(int device_fd, int32_t id);
  // The reply to the OPEN that answers with handle `fh` passes through to
  // backing file `id`. Undo() if that reply is never sent.
  void Direct(uint64_t fh, int32_t id);
  void Undo(uint64_t fh);

  // The hooks (public for the C trampolines).
  ssize_t Read(int fd, void* buf, size_t len);
  ssize_t Writev(int fd, struct iovec* iov, int count);

  // OPEN requests read and not yet answered.
  size_t PendingOpensForTest();

 private:
  // A worker thread as the read hook sees it.
  struct Worker {
    pthread_t thread;
    std::atomic<int> state{0};  // kReading, kProcessing or kWaiting
  };
  // The threads that read through the hook; shared with each thread's
  // record of itself, which takes it out when the thread ends (perhaps
  // after this object).
  struct Workers {
    core::Mutex mu;
    std::list<Worker> list PERCH_GUARDED_BY(mu);
  };
  Worker* ThisWorker();
  void NoteInit(const void* init, size_t n);

  std::atomic<bool> stopping_{false};
  std::atomic<bool> exited_{false};
  std::atomic<bool> offered_{false};
  std::atomic<bool> agreed_{false};
  bool want_ = false;  // set in the init callback, read when its reply goes out
  std::atomic<uint64_t> init_unique_{0};
  std::atomic<int> pending_{0};  // OPEN requests read and not yet answered

  mutable core::Mutex mu_;
  std::unordered_set<uint64_t> open_requests_ PERCH_GUARDED_BY(mu_);
  std::unordered_map<uint64_t, int32_t> direct_ PERCH_GUARDED_BY(mu_);  // fh -> backing id
  std::string init_ PERCH_GUARDED_BY(mu_);
  const std::shared_ptr<Workers> workers_ = std::make_shared<Workers>();
};

}  // namespace perch::fuse
