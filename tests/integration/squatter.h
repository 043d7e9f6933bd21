// Squatter: an unprivileged local user (nobody) who tries, every
// millisecond, to listen on a loopback port perchd uses, and once it has it
// answers every request as if it were perchd's endpoint: `/.perch/mounts`
// with the JSON it was given, anything else with "EVIL BYTES!\n" (200). For
// the tests of issue #42: a port perchd lets go of, even for a moment, is
// one this user takes.
//
// Thread-safety: one thread.
#pragma once

#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace perch::testing {

class Squatter {
 public:
  static constexpr uid_t kNobody = 65534;

  Squatter(int port, const std::string& mounts_json) {
    int out[2];
    if (::pipe(out) != 0) return;
    const std::string p = std::to_string(port);  // nothing allocates after the fork
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      ::close(out[1]);
      if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0)
        _exit(3);
      ::execl("/usr/bin/python3", "python3", "-c", kScript, p.c_str(), mounts_json.c_str(),
              static_cast<char*>(nullptr));
      _exit(4);
    }
    ::close(out[1]);
    out_ = out[0];
  }
  ~Squatter() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }
  Squatter(const Squatter&) = delete;
  Squatter& operator=(const Squatter&) = delete;

  // Whether it has had the port (it says so once), waiting up to `wait`.
  bool Won(std::chrono::milliseconds wait = std::chrono::milliseconds(0)) {
    if (won_) return true;
    struct pollfd p {
      out_, POLLIN, 0
    };
    if (out_ >= 0 && ::poll(&p, 1, static_cast<int>(wait.count())) == 1) {
      char buf[64];
      ssize_t n = ::read(out_, buf, sizeof buf);
      won_ = n > 0 && std::string(buf, static_cast<size_t>(n)).find("won") != std::string::npos;
    }
    return won_;
  }
  bool Running() { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  static constexpr const char* kScript = R"PY(
import socket, sys, time
port, mounts = int(sys.argv[1]), sys.argv[2].encode()
s = None
while s is None:
    t = socket.socket()
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        t.bind(("127.0.0.1", port))
        t.listen(16)
        s = t
    except OSError:
        t.close()
        time.sleep(0.001)
print("won", flush=True)
while True:
    c, _ = s.accept()
    req = c.recv(65536).decode("latin1")
    parts = req.split(" ")
    path = parts[1] if len(parts) > 1 else "/"
    body = mounts if path.startswith("/.perch/mounts") else b"EVIL BYTES!\n"
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\n\r\n" % len(body) + body)
    c.close()
)PY";

  pid_t pid_ = -1;
  int out_ = -1;
  bool won_ = false;
};

// A loopback port that was free a moment ago.
inline int FreeLoopbackPort() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(s);
  return port;
}

}  // namespace perch::testing
