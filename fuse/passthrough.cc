#include "fuse/passthrough.h"

#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace perch::fuse {

namespace {

// From the kernel's <linux/fuse.h> (protocol 7.40), which Debian 12's headers
// (6.1) predate.
struct BackingMap {
  int32_t fd;
  uint32_t flags;
  uint64_t padding;
};
constexpr unsigned long kIocBackingOpen = _IOW(229, 1, BackingMap);
constexpr unsigned long kIocBackingClose = _IOW(229, 2, uint32_t);
constexpr uint32_t kOpInit = 26;
constexpr uint32_t kOpOpen = 14;
constexpr uint32_t kInitExt = 1u << 30;           // fuse_init_in/out.flags: flags2 is valid
constexpr uint32_t kPassthroughFlags2 = 1u << 5;  // FUSE_PASSTHROUGH (1 << 37) in flags2
constexpr uint32_t kFopenKeepCache = 1u << 1;
constexpr uint32_t kFopenPassthrough = 1u << 7;
// Offsets: fuse_in_header {len, opcode, unique, nodeid, uid, gid, pid, total_extlen, padding}
// (40 bytes); fuse_init_in {major, minor, max_readahead, flags, flags2, ...};
// fuse_out_header {len, error, unique}; fuse_init_out {..., flags @12, ...,
// flags2 @32, max_stack_depth @36}; fuse_open_out {fh, open_flags @8, backing_id @12}.
constexpr size_t kInHeader = 40;
// The id of the INIT a successor replays (ReplayInit): never one of the
// kernel's (they count up from 2 in steps of 2), and its reply is not sent.
constexpr uint64_t kReplayUnique = ~uint64_t{1};

enum WorkerState { kReading = 0, kProcessing = 1, kWaiting = 2 };

// The worker this thread is to the session whose hook it runs, unregistered
// when the thread ends (libfuse ends idle workers beyond its limit).
struct ThreadWorker {
  const void* owner = nullptr;
  void* worker = nullptr;
  std::function<void()> forget;
  ~ThreadWorker() {
    if (forget) forget();
  }
};
thread_local ThreadWorker t_worker;

template <typename T>
T Load(const void* p, size_t at) {
  T v;
  std::memcpy(&v, static_cast<const char*>(p) + at, sizeof(v));
  return v;
}
template <typename T>
void Store(void* p, size_t at, T v) {
  std::memcpy(static_cast<char*>(p) + at, &v, sizeof(v));
}

Passthrough* (*g_from_userdata)(void*) = nullptr;  // one function for every session

ssize_t ReadHook(int fd, void* buf, size_t len, void* userdata) {
  return g_from_userdata(userdata)->Read(fd, buf, len);
}
ssize_t WritevHook(int fd, struct iovec* iov, int count, void* userdata) {
  return g_from_userdata(userdata)->Writev(fd, iov, count);
}
ssize_t SpliceSendHook(int fdin, off_t* offin, int fdout, off_t* offout, size_t len,
                       unsigned int flags, void*) {
  return ::splice(fdin, offin, fdout, offout, len, flags);
}

}  // namespace

Passthrough::Worker* Passthrough::ThisWorker() {
  if (t_worker.owner == workers_.get()) return static_cast<Worker*>(t_worker.worker);
  if (t_worker.forget) t_worker.forget();  // a thread that read for another session before
  core::MutexLock l(workers_->mu);
  workers_->list.emplace_back();
  auto it = std::prev(workers_->list.end());
  it->thread = pthread_self();
  t_worker.owner = workers_.get();
  t_worker.worker = &*it;
  t_worker.forget = [workers = workers_, it] {
    core::MutexLock l(workers->mu);
    workers->list.erase(it);
  };
  return &*it;
}

void Passthrough::NoteInit(const void* init, size_t n) {
  if (n < 20) return;
  const uint32_t flags = Load<uint32_t>(init, 12);
  const uint32_t flags2 = Load<uint32_t>(init, 16);
  offered_.store((flags & kInitExt) && (flags2 & kPassthroughFlags2), std::memory_order_release);
  core::MutexLock l(mu_);
  init_.assign(static_cast<const char*>(init), n);
}

std::string Passthrough::init() const {
  core::MutexLock l(mu_);
  return init_;
}

void Passthrough::ReplayInit(struct fuse_session* se, const std::string& init, bool agreed) {
  std::vector<char> buf(kInHeader + init.size());
  Store<uint32_t>(buf.data(), 0, static_cast<uint32_t>(buf.size()));  // len
  Store<uint32_t>(buf.data(), 4, kOpInit);                            // opcode
  Store<uint64_t>(buf.data(), 8, kReplayUnique);                      // unique
  std::memcpy(buf.data() + kInHeader, init.data(), init.size());
  NoteInit(init.data(), init.size());
  init_unique_.store(kReplayUnique, std::memory_order_release);
  struct fuse_buf fb {};
  fb.size = buf.size();
  fb.mem = buf.data();
  fuse_session_process_buf(se, &fb);
  // What the kernel agreed with the previous perchd, whatever this one asked.
  agreed_.store(agreed && offered(), std::memory_order_release);
}

bool Passthrough::StopReading(const std::function<void(pthread_t)>& wake,
                              std::chrono::steady_clock::time_point deadline) {
  stopping_.store(true);  // seq_cst: a worker that reads after this sees it, or is seen reading
  while (true) {
    bool all_waiting = true;
    {
      core::MutexLock l(workers_->mu);
      for (Worker& w : workers_->list) {
        const int state = w.state.load();
        if (state == kWaiting) continue;
        all_waiting = false;
        if (state == kReading) wake(w.thread);  // blocked in read(2), or about to be
      }
    }
    if (all_waiting) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void Passthrough::ResumeReading() { stopping_.store(false); }

void Passthrough::EndReading() { exited_.store(true); }

core::Status Passthrough::Install(struct fuse_session* se, Passthrough* (*from_userdata)(void*)) {
  g_from_userdata = from_userdata;
  // No splice_receive: requests are read with read(2), where the hooks see
  // them (perch asks for no splice reads: it takes no writes). splice_send
  // keeps replies spliced from the cache's files.
  struct fuse_custom_io io {};
  io.read = &ReadHook;
  io.writev = &WritevHook;
  io.splice_send = &SpliceSendHook;
  int rc = fuse_session_custom_io(se, &io, fuse_session_fd(se));
  if (rc != 0)
    return core::InternalError("fuse_session_custom_io: " + std::string(std::strerror(-rc)));
  return core::Status::Ok();
}

ssize_t Passthrough::Read(int fd, void* buf, size_t len) {
  Worker* w = ThisWorker();
  w->state.store(kReading);  // seq_cst: StopReading sees it, or this sees stopping_
  ssize_t n = -1;
  while (true) {
    if (stopping_.load()) {
      // Wait for the end of the session (then libfuse's worker, finding it
      // exited, ends), or to read again.
      w->state.store(kWaiting);
      while (stopping_.load() && !exited_.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      w->state.store(kReading);
      if (exited_.load()) {
        errno = EINTR;
        return -1;
      }
      continue;
    }
    n = ::read(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;  // StopReading's signal, or another: look again
    break;
  }
  w->state.store(kProcessing);
  if (n < static_cast<ssize_t>(kInHeader)) return n;
  const uint32_t opcode = Load<uint32_t>(buf, 4);
  const uint64_t unique = Load<uint64_t>(buf, 8);
  if (opcode == kOpOpen) {
    core::MutexLock l(mu_);
    if (open_requests_.insert(unique).second) pending_.fetch_add(1, std::memory_order_release);
  } else if (opcode == kOpInit && n >= static_cast<ssize_t>(kInHeader + 20)) {
    NoteInit(static_cast<const char*>(buf) + kInHeader, static_cast<size_t>(n) - kInHeader);
    init_unique_.store(unique, std::memory_order_release);
  }
  return n;
}

ssize_t Passthrough::Writev(int fd, struct iovec* iov, int count) {
  // iov[0] is the fuse_out_header; a reply with an argument has it in iov[1].
  // An error reply is the header alone (one iovec): it too answers its OPEN,
  // which must be forgotten, or open_requests_ grows by every failed open.
  if (count < 1 || iov[0].iov_len < 16) return ::writev(fd, iov, count);
  const uint64_t unique = Load<uint64_t>(iov[0].iov_base, 8);
  const int32_t error = Load<int32_t>(iov[0].iov_base, 4);
  if (count >= 2 && unique == init_unique_.load(std::memory_order_acquire) && error == 0 &&
      iov[1].iov_len >= 40 && want_ && offered()) {
    void* out = iov[1].iov_base;
    Store<uint32_t>(out, 12, Load<uint32_t>(out, 12) | kInitExt);
    Store<uint32_t>(out, 32, Load<uint32_t>(out, 32) | kPassthroughFlags2);
    Store<uint32_t>(out, 36, 1);  // max_stack_depth: the cache's filesystem is not stacked
    agreed_.store(true, std::memory_order_release);
  }
  if (unique == kReplayUnique) {  // the kernel had its answer from the previous perchd
    size_t total = 0;
    for (int i = 0; i < count; ++i) total += iov[i].iov_len;
    return static_cast<ssize_t>(total);
  } else if (pending_.load(std::memory_order_acquire) > 0) {
    core::MutexLock l(mu_);
    if (open_requests_.erase(unique) > 0) {
      pending_.fetch_sub(1, std::memory_order_release);
      if (error == 0 && count >= 2 && iov[1].iov_len == 16) {
        void* out = iov[1].iov_base;
        auto it = direct_.find(Load<uint64_t>(out, 0));
        if (it != direct_.end()) {
          // Passthrough allows no keep_cache: the page cache is the backing file's.
          Store<uint32_t>(out, 8, (Load<uint32_t>(out, 8) & ~kFopenKeepCache) | kFopenPassthrough);
          Store<int32_t>(out, 12, it->second);
          direct_.erase(it);
        }
      }
    }
  }
  return ::writev(fd, iov, count);
}

size_t Passthrough::PendingOpensForTest() {
  core::MutexLock l(mu_);
  return open_requests_.size();
}

core::Result<int32_t> Passthrough::OpenBacking(int device_fd, int fd) {
  BackingMap map{fd, 0, 0};
  int id = ::ioctl(device_fd, kIocBackingOpen, &map);
  if (id <= 0) {
    return core::Status(core::StatusCode::kUnavailable,
                        "FUSE passthrough: the kernel refused the backing file: " +
                            std::string(std::strerror(id < 0 ? errno : EINVAL)),
                        core::FailureSite::kLocal);
  }
  return static_cast<int32_t>(id);
}

void Passthrough::CloseBacking(int device_fd, int32_t id) {
  uint32_t u = static_cast<uint32_t>(id);
  ::ioctl(device_fd, kIocBackingClose, &u);
}

void Passthrough::Direct(uint64_t fh, int32_t id) {
  core::MutexLock l(mu_);
  direct_[fh] = id;
}

void Passthrough::Undo(uint64_t fh) {
  core::MutexLock l(mu_);
  direct_.erase(fh);
}

}  // namespace perch::fuse
