#include "perchd/handoff.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "daemon/core/codec.h"

namespace perch::handoff {

namespace {

constexpr char kHello[8] = {'P', 'E', 'R', 'C', 'H', 'H', 'O', '1'};
// Mounts and listening sockets in one message (the kernel takes at most 253).
constexpr size_t kMaxDescriptors = 128;
constexpr uint64_t kMaxMountpoint = 4096;
constexpr uint64_t kMaxState = uint64_t{16} << 30;  // 16 GiB: tens of millions of inodes

core::Status Errno(const std::string& what) {
  return core::InternalError("handoff: " + what + ": " + std::strerror(errno));
}

int Remaining(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

// Reads exactly `n` bytes by `deadline`.
core::Status ReadAll(int fd, void* buf, size_t n, std::chrono::steady_clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    struct pollfd pfd {
      fd, POLLIN, 0
    };
    int r = ::poll(&pfd, 1, Remaining(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Errno("poll");
    if (r == 0) return core::DeadlineExceededError("handoff: the other perchd did not answer");
    ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Errno("recv");
    if (got == 0) return core::UnavailableError("handoff: the other perchd went away");
    p += got;
    n -= static_cast<size_t>(got);
  }
  return core::Status::Ok();
}

core::Status WriteAll(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) return Errno("send");
    p += put;
    n -= static_cast<size_t>(put);
  }
  return core::Status::Ok();
}

core::Status WriteU64(int fd, uint64_t v) {
  std::string s;
  core::codec::PutU64(&s, v);
  return WriteAll(fd, s.data(), s.size());
}

core::Result<uint64_t> ReadU64(int fd, std::chrono::steady_clock::time_point deadline) {
  char b[8];
  if (core::Status s = ReadAll(fd, b, 8, deadline); !s.ok()) return s;
  uint64_t v = 0;
  core::codec::Reader(std::string_view(b, 8)).GetU64(&v);
  return v;
}

}  // namespace

std::string SocketPath(const std::string& cache_dir) {
  return (std::filesystem::path(cache_dir) / "handoff.sock").string();
}

Listener::~Listener() { Stop(); }

core::Status Listener::Start(const std::string& path, std::function<void(int)> on_request) {
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return core::InvalidArgumentError("handoff: socket path " + path + " is too long");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return Errno("socket");
  ::unlink(path.c_str());  // a dead perchd's
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd_, 4) != 0 ||
      ::pipe2(wake_, O_CLOEXEC) != 0) {
    core::Status s = Errno("listen at " + path);
    Stop();
    return s;
  }
  ::chmod(path.c_str(), 0600);
  path_ = path;
  on_request_ = std::move(on_request);
  thread_ = std::thread([this] { Loop(); });
  return core::Status::Ok();
}

void Listener::Loop() {
  while (true) {
    struct pollfd pfd[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(pfd, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (pfd[1].revents != 0) return;
    int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    struct ucred cred {};
    socklen_t len = sizeof(cred);
    char hello[sizeof(kHello)];
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != ::geteuid() && cred.uid != 0)) {
      spdlog::warn("handoff: refused a connection from uid {}", cred.uid);
      ::close(conn);
      continue;
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    if (!ReadAll(conn, hello, sizeof(hello), deadline).ok() ||
        std::memcmp(hello, kHello, sizeof(hello)) != 0) {
      spdlog::warn("handoff: a connection from pid {} did not ask for a handoff", cred.pid);
      ::close(conn);
      continue;
    }
    spdlog::info("handoff: perchd pid {} asks to take over", cred.pid);
    on_request_(conn);
  }
}

void Listener::Stop() {
  if (thread_.joinable()) {
    char c = 0;
    if (::write(wake_[1], &c, 1) != 1) {
      // The pipe is ours and empty: cannot fail.
    }
    thread_.join();
  }
  for (int* fd : {&fd_, &wake_[0], &wake_[1]}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (!path_.empty()) ::unlink(path_.c_str());
  path_.clear();
}

core::Status Send(int conn, const std::vector<MountHandoff>& mounts) {
  // The descriptors ride on the first byte, then the rest as a stream.
  if (mounts.size() > kMaxDescriptors) {
    return core::InvalidArgumentError("handoff: " + std::to_string(mounts.size()) +
                                      " mounts and sockets, more than " +
                                      std::to_string(kMaxDescriptors) + " can travel");
  }
  std::vector<int> fds;
  for (const auto& m : mounts) fds.push_back(m.fd);
  char count = static_cast<char>(mounts.size());
  struct iovec iov {
    &count, 1
  };
  std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)));
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  while (::sendmsg(conn, &msg, MSG_NOSIGNAL) != 1) {
    if (errno != EINTR) return Errno("sendmsg");
  }
  for (const auto& m : mounts) {
    for (const std::string* s : {&m.mountpoint, &m.state}) {
      if (core::Status st = WriteU64(conn, s->size()); !st.ok()) return st;
      if (core::Status st = WriteAll(conn, s->data(), s->size()); !st.ok()) return st;
    }
  }
  return core::Status::Ok();
}

bool AwaitReady(int conn, std::chrono::steady_clock::time_point deadline) {
  char k = 0;
  if (core::Status s = ReadAll(conn, &k, 1, deadline); !s.ok() || k != 'K') {
    spdlog::warn("handoff: the next perchd did not take over ({})",
                 s.ok() ? "bad answer" : s.message());
    return false;
  }
  const char a = 'A';
  if (!WriteAll(conn, &a, 1).ok()) {
    // The successor went away after it opened everything: it would not
    // serve, so this perchd does (the worst case is a successor that dies
    // right after reading 'A'; then nobody serves: a crash, see design.md).
    return false;
  }
  char m = 0;
  (void)ReadAll(conn, &m, 1, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  return true;
}

core::Result<int> Connect(const std::string& path) {
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return core::InvalidArgumentError("handoff: socket path " + path + " is too long");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    core::Status s = core::UnavailableError("handoff: no perchd to take over from at " + path +
                                            ": " + std::strerror(errno));
    ::close(fd);
    return s;
  }
  // Only a perchd of this user (or root) may hand mounts over: whoever
  // listens there gets our hello and could feed us descriptors.
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
      (cred.uid != ::geteuid() && cred.uid != 0)) {
    ::close(fd);
    return core::PermissionDeniedError(
        "handoff: " + path + " is served by uid " + std::to_string(cred.uid) +
            ", not by perchd's user (uid " + std::to_string(::geteuid()) +
            "): not taking over from it",
        core::FailureSite::kLocal);
  }
  if (core::Status s = WriteAll(fd, kHello, sizeof(kHello)); !s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

core::Result<std::vector<MountHandoff>> Receive(int conn,
                                                std::chrono::steady_clock::time_point deadline) {
  std::vector<MountHandoff> out;
  char count = 0;
  struct iovec iov {
    &count, 1
  };
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kMaxDescriptors));
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  while (true) {
    struct pollfd pfd {
      conn, POLLIN, 0
    };
    int r = ::poll(&pfd, 1, Remaining(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return core::DeadlineExceededError("handoff: the running perchd did not hand over");
    ssize_t got = ::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Errno("recvmsg");
    if (got == 0)
      return core::UnavailableError("handoff: the running perchd refused (see its log)");
    break;
  }
  std::vector<int> fds;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const size_t at = fds.size();
      fds.resize(at + n);
      std::memcpy(fds.data() + at, CMSG_DATA(c), n * sizeof(int));
    }
  }
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  if ((msg.msg_flags & MSG_CTRUNC) || fds.size() != static_cast<unsigned char>(count)) {
    close_all();
    return core::InternalError("handoff: descriptors missing from the running perchd's message");
  }
  for (int fd : fds) {
    MountHandoff m;
    m.fd = fd;
    for (auto [s, max] : {std::pair{&m.mountpoint, kMaxMountpoint}, {&m.state, kMaxState}}) {
      auto n = ReadU64(conn, deadline);
      core::Status st = n.ok() ? core::Status::Ok() : n.status();
      if (st.ok() && *n > max) st = core::InvalidArgumentError("handoff: oversized message");
      if (st.ok()) {
        s->resize(*n);
        st = ReadAll(conn, s->data(), *n, deadline);
      }
      if (!st.ok()) {
        close_all();
        return st;
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

core::Status Confirm(int conn, std::chrono::steady_clock::time_point deadline,
                     const std::function<void()>& taken) {
  const char k = 'K';
  if (core::Status s = WriteAll(conn, &k, 1); !s.ok()) return s;
  char a = 0;
  if (core::Status s = ReadAll(conn, &a, 1, deadline); !s.ok()) return s;
  if (a != 'A') return core::InternalError("handoff: the running perchd answered badly");
  taken();
  const char m = 'M';
  (void)WriteAll(conn, &m, 1);  // it exits either way
  return core::Status::Ok();
}

}  // namespace perch::handoff
