// Issue #29 item 2, end to end: one local user must not lock every user out
// of the HTTP endpoint. Before the fix, 64 connections of `nobody` that each
// sent part of a request and then a byte every few seconds held every slot
// of the endpoint, and every other request got 503 for as long as they
// lasted. Here `nobody` (a forked child that drops to that uid) keeps 80
// such connections open, reconnecting whenever the endpoint closes one,
// while root reads a file through the endpoint again and again: root is
// served at once, `nobody` gets its share of the slots and 503 past it, and
// each of its connections ends with a 408 at the request deadline.
// Real perch-devfed, real perchd, real curl.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kSlowConnections = 80;   // more than the endpoint's 64 in all
constexpr int kShare = 16;             // the default --http-connections-per-user
constexpr double kRequestTimeout = 3;  // seconds: --http-request-timeout below

double Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// The IPv4 address of endpoint "127.0.0.1:PORT" (port 0 if it is not one).
sockaddr_in AddressOf(const std::string& address) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  const size_t colon = address.find(':');
  if (colon == std::string::npos ||
      ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return addr;
  }
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  return addr;
}

// What the slow client saw.
struct SlowReport {
  int connects = 0;            // connections opened
  int refused = 0;             // answered 503 (at once)
  int timed_out = 0;           // answered 408
  int cut = 0;                 // closed without an answer
  int max_held = 0;            // the most open at once that had no answer after a second
  double first_timeout = 1e9;  // seconds from connect to the quickest 408
  double last_timeout = 0;     // ... and to the slowest

  std::string ToString() const {
    std::ostringstream o;
    o << connects << " connects, " << refused << " refused, " << timed_out << " timed out ("
      << first_timeout << " to " << last_timeout << " s after connecting), " << cut
      << " cut, at most " << max_held << " held";
    return o.str();
  }
};

// The slow client's loop, in the forked child (no allocation: the parent
// may have threads): every second, each of kSlowConnections slots that is
// closed is connected and sent the start of a request, each open one gets
// one more header byte; in between, answers are read and their slots
// closed. After `hold` seconds the report goes to `out`.
[[noreturn]] void SlowClientLoop(const sockaddr_in& addr, int out, int hold) {
  static const char kStart[] =
      "GET /test/f.bin HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\nX-Slow: ";
  int fd[kSlowConnections];
  double opened[kSlowConnections] = {};
  std::fill(fd, fd + kSlowConnections, -1);
  SlowReport r;
  bool ready = false;
  const double begin = Now();
  for (int second = 0; second < hold; ++second) {
    const double tick = begin + second;
    int held = 0;
    for (int i = 0; i < kSlowConnections; ++i) {
      if (fd[i] >= 0) {
        held += opened[i] < tick - 0.9 ? 1 : 0;
        if (::send(fd[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
          // Closed by the endpoint: the poll below reads its answer.
        }
        continue;
      }
      fd[i] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd[i] < 0) _exit(3);
      if (::connect(fd[i], reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
          ::send(fd[i], kStart, sizeof(kStart) - 1, MSG_NOSIGNAL) < 0) {
        ::close(fd[i]);
        fd[i] = -1;
        continue;
      }
      opened[i] = Now();
      ++r.connects;
    }
    r.max_held = std::max(r.max_held, held);
    if (!ready && ::write(out, "R", 1) == 1) ready = true;
    while (Now() < tick + 1) {
      pollfd p[kSlowConnections];
      int slot[kSlowConnections];
      int n = 0;
      for (int i = 0; i < kSlowConnections; ++i) {
        if (fd[i] >= 0) {
          p[n] = {fd[i], POLLIN, 0};
          slot[n++] = i;
        }
      }
      if (::poll(p, static_cast<nfds_t>(n), static_cast<int>((tick + 1 - Now()) * 1000) + 1) <= 0)
        continue;
      for (int k = 0; k < n; ++k) {
        if (p[k].revents == 0) continue;
        const int i = slot[k];
        char buf[32] = {};
        const ssize_t got = ::recv(fd[i], buf, sizeof(buf) - 1, MSG_DONTWAIT);
        if (got < 0 && errno == EAGAIN) continue;
        if (std::strncmp(buf, "HTTP/1.1 503", 12) == 0) {
          ++r.refused;
        } else if (std::strncmp(buf, "HTTP/1.1 408", 12) == 0) {
          ++r.timed_out;
          r.first_timeout = std::min(r.first_timeout, Now() - opened[i]);
          r.last_timeout = std::max(r.last_timeout, Now() - opened[i]);
        } else {
          ++r.cut;
        }
        ::close(fd[i]);
        fd[i] = -1;
      }
    }
  }
  _exit(::write(out, &r, sizeof(r)) == sizeof(r) ? 0 : 4);
}

// The slow client as `nobody`, in a child process killed by the destructor
// (and by the kernel when the test process dies).
class SlowClient {
 public:
  SlowClient() = default;
  ~SlowClient() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (pipe_ >= 0) ::close(pipe_);
  }
  SlowClient(const SlowClient&) = delete;
  SlowClient& operator=(const SlowClient&) = delete;

  // Starts the client on endpoint "127.0.0.1:PORT" for `hold` seconds and
  // waits until it has made its first connections; "" or what failed.
  std::string Start(const std::string& address, int hold) {
    const passwd* nobody = ::getpwnam("nobody");
    if (nobody == nullptr) return "no user nobody";
    const uid_t uid = nobody->pw_uid;
    const gid_t gid = nobody->pw_gid;
    const sockaddr_in addr = AddressOf(address);
    if (addr.sin_port == 0) return "not IPv4: " + address;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return "pipe failed";
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[0]);
      if (::setgroups(0, nullptr) != 0 || ::setresgid(gid, gid, gid) != 0 ||
          ::setresuid(uid, uid, uid) != 0) {
        _exit(2);
      }
      // After the uid change, which clears it; and the parent may be gone already.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(1);
      SlowClientLoop(addr, p[1], hold);
    }
    ::close(p[1]);
    pipe_ = p[0];
    if (pid_ < 0) return "fork failed";
    pollfd w{pipe_, POLLIN, 0};
    char c = 0;
    if (::poll(&w, 1, 10000) != 1 || ::read(pipe_, &c, 1) != 1 || c != 'R')
      return "the slow client did not start";
    return "";
  }

  // Waits for the client's end and returns what it saw.
  SlowReport Finish() {
    SlowReport r;
    int status = 0;
    EXPECT_EQ(::waitpid(pid_, &status, 0), pid_);
    pid_ = -1;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    EXPECT_EQ(::read(pipe_, &r, sizeof(r)), static_cast<ssize_t>(sizeof(r)));
    return r;
  }

 private:
  pid_t pid_ = -1;
  int pipe_ = -1;
};

class SlowClientsTest : public MountedFederation {
 protected:
  void SetUp() override { StartFederation("issue29", {{"f.bin", 300000}}); }

  // Mounts with the endpoint and a request deadline of kRequestTimeout;
  // returns the endpoint's "IP:PORT".
  std::string MountWithEndpoint() {
    Mount({"--http", "127.0.0.1:0", "--http-request-timeout",
           std::to_string(static_cast<int>(kRequestTimeout)) + "s"});
    return CtlJson({"health", "--json"})["http_address"];
  }
};

TEST_F(SlowClientsTest, OneUsersSlowConnectionsDoNotLockOthersOut) {
  const std::string address = MountWithEndpoint();
  ASSERT_FALSE(address.empty());
  const std::string url = "http://" + address + "/test/f.bin";
  const fs::path got = work_->path() / "got.bin";

  constexpr int kHold = 12;
  SlowClient slow;
  const double start = Now();
  ASSERT_EQ(slow.Start(address, kHold), "");
  // Root, another uid, reads the file again and again while `nobody` holds on.
  int tries = 0;
  while (Now() - start < kHold - 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    fs::remove(got);
    RunResult r = RunToExit("/usr/bin/curl", {"-sS", "--max-time", "10", "-o", got.string(), "-w",
                                              "%{http_code} %{time_total}", url});
    std::string code;
    double seconds = 0;
    std::istringstream(r.output) >> code >> seconds;
    EXPECT_EQ(code, "200") << r.output;
    EXPECT_LT(seconds, 3) << r.output;
    EXPECT_TRUE(ReadLocalFile(got) == Original("f.bin"));
    ++tries;
  }
  EXPECT_GE(tries, 5);

  const SlowReport s = slow.Finish();
  std::cout << "root: " << tries << " GETs; nobody: " << s.ToString() << "\n";
  EXPECT_GE(s.connects, kSlowConnections);
  // `nobody` held its share and no more; its other connections got 503 at once.
  EXPECT_EQ(s.max_held, kShare);
  EXPECT_GE(s.refused, kSlowConnections - kShare);
  // Each connection it held ended at the request deadline, a byte a second notwithstanding.
  EXPECT_GE(s.timed_out, kShare);
  EXPECT_GE(s.first_timeout, kRequestTimeout - 0.1);
  EXPECT_LE(s.last_timeout, kRequestTimeout + 1.5);
  EXPECT_EQ(s.cut, 0);

  // Counted (answers sent as the client stopped reading are counted too).
  const nlohmann::json stats = CtlJson({"stats", "--json"})["http_endpoint"];
  EXPECT_GE(stats["refused_per_user"].get<uint64_t>(), static_cast<uint64_t>(s.refused));
  EXPECT_GE(stats["request_timeouts"].get<uint64_t>(), static_cast<uint64_t>(s.timed_out));
  // And root still reads once `nobody` has gone.
  EXPECT_EQ(
      RunToExit("/usr/bin/curl", {"-sS", "-o", "/dev/null", "-w", "%{http_code}", url}).output,
      "200");
}

// A connection that sends nothing gets a 408 at the deadline; one idle
// between requests (keep-alive) is closed then too, without an answer.
TEST_F(SlowClientsTest, TheDeadlineEndsSilentAndIdleConnections) {
  const std::string address = MountWithEndpoint();
  ASSERT_FALSE(address.empty());
  const sockaddr_in addr = AddressOf(address);
  // Reads until the endpoint closes `fd`; returns what it sent, and when.
  auto read_to_end = [](int fd, double* closed_at) {
    std::string got;
    char buf[4096];
    pollfd p{fd, POLLIN, 0};
    while (::poll(&p, 1, 10000) == 1) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    *closed_at = Now();
    return got;
  };
  const int silent = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int idle = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(silent, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::connect(idle, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)), 0);
  const double start = Now();
  const std::string head = "HEAD /test/f.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_EQ(::send(idle, head.data(), head.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(head.size()));
  double silent_closed = 0, idle_closed = 0;
  const std::string to_silent = read_to_end(silent, &silent_closed);
  const std::string to_idle = read_to_end(idle, &idle_closed);
  ::close(silent);
  ::close(idle);
  EXPECT_EQ(to_silent.rfind("HTTP/1.1 408 ", 0), 0u) << to_silent;
  EXPECT_GE(silent_closed - start, kRequestTimeout - 0.1);
  EXPECT_LE(silent_closed - start, kRequestTimeout + 1.5);
  // The HEAD was answered, then nothing: the connection just ended.
  EXPECT_EQ(to_idle.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << to_idle;
  EXPECT_TRUE(to_idle.ends_with("\r\n\r\n")) << to_idle;
  EXPECT_GE(idle_closed - start, kRequestTimeout - 0.1);
  EXPECT_LE(idle_closed - start, kRequestTimeout + 1.5);
  // Only the silent one counts as a request that did not arrive.
  EXPECT_EQ(CtlJson({"stats", "--json"})["http_endpoint"]["request_timeouts"], 1);
}

}  // namespace
}  // namespace perch::testing

namespace perch::testing {
namespace {

// The open descriptors of process `pid`.
int OpenFds(pid_t pid) {
  int n = 0;
  for ([[maybe_unused]] const auto& e :
       fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    ++n;
  }
  return n;
}

// The metrics listener (#29's last known gap): `nobody` keeps 80 connections
// open to it; perchd holds at most its share of them (8) and closes the rest
// at once, so a local user cannot make perchd spend the descriptors its reads
// need, and root's scrapes are still answered. On the old listener every
// connection was held for its 5 s deadline (80 descriptors more).
TEST_F(SlowClientsTest, OneUserCannotMakeTheMetricsListenerHoldDescriptors) {
  Mount({"--metrics", "127.0.0.1:0"});
  const std::string address = CtlJson({"health", "--json"})["metrics_address"];
  ASSERT_FALSE(address.empty());
  const int before = OpenFds(perchd_.pid());

  constexpr int kHold = 8;
  SlowClient slow;
  const double start = Now();
  ASSERT_EQ(slow.Start(address, kHold), "");
  int most = 0, scrapes = 0;
  while (Now() - start < kHold - 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    most = std::max(most, OpenFds(perchd_.pid()) - before);
    RunResult r = RunToExit("/usr/bin/curl", {"-sS", "--max-time", "5", "-o", "/dev/null", "-w",
                                              "%{http_code}", "http://" + address + "/metrics"});
    EXPECT_EQ(r.output, "200");
    ++scrapes;
  }
  const SlowReport s = slow.Finish();
  std::cout << "root: " << scrapes << " scrapes; perchd held at most " << most
            << " more descriptors; nobody: " << s.ToString() << "\n";
  EXPECT_GE(s.connects, kSlowConnections);
  EXPECT_LE(most, 8 + 4) << "nobody's connections were held";  // its share, and a scrape's
  EXPECT_LE(s.max_held, 8);
}

}  // namespace
}  // namespace perch::testing
