#include "daemon/endpoint/http_endpoint.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "daemon/endpoint/connection.h"
#include "proto/control_address.h"

namespace perch::endpoint {

namespace {

void SetTimeouts(int fd, std::chrono::milliseconds t) {
  timeval tv{static_cast<time_t>(t.count() / 1000),
             static_cast<suseconds_t>((t.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

}  // namespace

HttpEndpoint::HttpEndpoint(core::CacheStack& stack, core::OpMetrics& metrics,
                           EndpointOptions options)
    : shared_(std::make_shared<Shared>(stack, metrics, options)) {}

HttpEndpoint::~HttpEndpoint() {
  Shutdown();
  Join();
}

core::Status HttpEndpoint::Start(const std::string& address, bool allow_remote, int listening) {
  if (std::string why = CheckListenAddress("http", address, allow_remote, "--http-allow-remote",
                                           "http_allow_remote");
      !why.empty() || address.empty()) {
    if (listening >= 0) ::close(listening);
    return core::InvalidArgumentError(why.empty() ? "no http address" : why);
  }
  if (listening >= 0) {
    int accepting = 0;
    socklen_t al = sizeof(accepting);
    if (::getsockopt(listening, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &al) != 0 || !accepting ||
        ::pipe2(wake_fd_, O_CLOEXEC) != 0) {
      ::close(listening);
      return core::InvalidArgumentError("the http socket handed over for " + address +
                                        " is not listening");
    }
    listen_fd_ = listening;
    return Serve();
  }
  std::string host;
  unsigned port = 0;
  SplitHostPort(address, &host, &port);  // checked above
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (auto* in = reinterpret_cast<sockaddr_in*>(&sa);
      ::inet_pton(AF_INET, host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (auto* in6 = reinterpret_cast<sockaddr_in6*>(&sa);
             ::inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return core::InvalidArgumentError("bad http address '" + address + "'");
  }
  int fd = ::socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 || ::listen(fd, 128) != 0 ||
      ::pipe2(wake_fd_, O_CLOEXEC) != 0) {
    std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return core::InvalidArgumentError("cannot listen for http on " + address + ": " + why);
  }
  listen_fd_ = fd;
  return Serve();
}

int HttpEndpoint::DupListener() const {
  return listen_fd_ < 0 ? -1 : ::fcntl(listen_fd_, F_DUPFD_CLOEXEC, 0);
}

core::Status HttpEndpoint::Serve() {
  const int fd = listen_fd_;
  sockaddr_storage bound{};
  socklen_t bl = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bl);
  char ip[INET6_ADDRSTRLEN] = {};
  if (bound.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&bound);
    ::inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    address_ = std::string(ip) + ":" + std::to_string(ntohs(in->sin_port));
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&bound);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
    address_ = "[" + std::string(ip) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  acceptor_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "perch-http");  // its connections' threads take it
    AcceptLoop();
  });
  spdlog::info("HTTP endpoint on http://{}/ (GET, HEAD, PROPFIND of federation paths)", address_);
  return core::Status::Ok();
}

void HttpEndpoint::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("http: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;  // Shutdown
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        spdlog::warn("http: accept: {}", std::strerror(errno));
        ::poll(nullptr, 0, 100);  // e.g. out of descriptors: do not spin
      }
      continue;
    }
    SetTimeouts(fd, shared_->options.io_timeout);
    // The connection is charged to its peer's uid, so that one user's
    // connections cannot take every slot (connection_slots.h).
    const std::optional<Peer> peer = LoopbackPeer(fd);
    const ConnectionSlots::Owner owner = peer ? ConnectionSlots::Owner(peer->uid) : std::nullopt;
    std::shared_ptr<Shared> s = shared_;
    ConnectionSlots::Admission admission = ConnectionSlots::Admission::kFull;
    {
      core::MutexLock l(s->mu);
      if (!s->stopping) admission = s->slots.Acquire(owner);
      if (admission == ConnectionSlots::Admission::kAdmitted) s->fds.insert(fd);
    }
    if (admission == ConnectionSlots::Admission::kOwnerFull) {
      s->metrics.endpoint().refused_per_user.fetch_add(1, std::memory_order_relaxed);
      SendAndForget(fd, "503 Service Unavailable", "Retry-After: 1\r\n",
                    fmt::format("perchd: {} has {} connections open, its share; try again\n",
                                peer ? "uid " + std::to_string(peer->uid) : "an unknown peer",
                                s->options.max_connections_per_user));
    } else if (admission == ConnectionSlots::Admission::kFull) {
      SendAndForget(fd, "503 Service Unavailable", "Retry-After: 1\r\n",
                    "perchd: too many connections; try again\n");
    }
    if (admission != ConnectionSlots::Admission::kAdmitted) {
      ::close(fd);
      continue;
    }
    std::thread([s, fd, peer, owner] {
      ServeConnection(*s, fd, peer);
      core::MutexLock l(s->mu);
      s->fds.erase(fd);
      ::close(fd);
      s->slots.Release(owner);
      s->idle.NotifyAll();
    }).detach();
  }
}

void HttpEndpoint::Shutdown() {
  if (listen_fd_ < 0) return;
  {
    core::MutexLock l(shared_->mu);
    if (shared_->stopping) return;
    shared_->stopping = true;
    for (int fd : shared_->fds) ::shutdown(fd, SHUT_RDWR);
  }
  if (::write(wake_fd_[1], "x", 1) != 1) {
    // The acceptor also ends when the pipe is closed below.
  }
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  ::close(wake_fd_[0]);
  ::close(wake_fd_[1]);
}

void HttpEndpoint::Join() {
  core::MutexLock l(shared_->mu);
  while (shared_->slots.held() != 0) shared_->idle.Wait(shared_->mu);
}

}  // namespace perch::endpoint
