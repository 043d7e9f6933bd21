// HeldPort: a TCP port on 127.0.0.1 that stays bound (SO_REUSEADDR, never
// listening) while the object lives, so that no one else on the machine gets
// it: bind(0) and connect() skip a bound port. A server told to listen on it
// binds it too (XRootD, like most servers, sets SO_REUSEADDR), and a client
// that connects to it while nothing listens is refused, as from a free port.
//
// Why: tests run side by side, each with its own servers on ports the kernel
// picks. A port picked and closed (to hand to xrootd), or freed by a server a
// test stopped on purpose, could otherwise become another test's server in
// between, and a client would then reach the wrong federation.
//
// Thread-safety: not thread-safe; one owner.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace perch::devfed {

class HeldPort {
 public:
  // A port the kernel picks; port() is 0 if none could be bound.
  HeldPort() { Bind(0); }
  // `port` itself, tried until `patience` has passed (a server that was just
  // stopped may hold it for a moment). held() says whether it is held.
  HeldPort(int port, std::chrono::milliseconds patience) {
    auto end = std::chrono::steady_clock::now() + patience;
    while (!Bind(port) && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~HeldPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;

  int port() const { return port_; }
  bool held() const { return fd_ >= 0; }

 private:
  bool Bind(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    socklen_t len = sizeof(addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(fd);
      return false;
    }
    fd_ = fd;
    port_ = ntohs(addr.sin_port);
    return true;
  }

  int fd_ = -1;
  int port_ = 0;
};

}  // namespace perch::devfed
