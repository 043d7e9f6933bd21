#include "fuse/passthrough.h"

#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

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
  ssize_t n = ::read(fd, buf, len);
  if (n < static_cast<ssize_t>(kInHeader)) return n;
  const uint32_t opcode = Load<uint32_t>(buf, 4);
  const uint64_t unique = Load<uint64_t>(buf, 8);
  if (opcode == kOpOpen) {
    std::lock_guard<std::mutex> l(mu_);
    if (open_requests_.insert(unique).second) pending_.fetch_add(1, std::memory_order_release);
  } else if (opcode == kOpInit && n >= static_cast<ssize_t>(kInHeader + 20)) {
    const uint32_t flags = Load<uint32_t>(buf, kInHeader + 12);
    const uint32_t flags2 = Load<uint32_t>(buf, kInHeader + 16);
    offered_.store((flags & kInitExt) && (flags2 & kPassthroughFlags2), std::memory_order_release);
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
  } else if (pending_.load(std::memory_order_acquire) > 0) {
    std::lock_guard<std::mutex> l(mu_);
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
  std::lock_guard<std::mutex> l(mu_);
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
  std::lock_guard<std::mutex> l(mu_);
  direct_[fh] = id;
}

void Passthrough::Undo(uint64_t fh) {
  std::lock_guard<std::mutex> l(mu_);
  direct_.erase(fh);
}

}  // namespace perch::fuse
