// Handoff: how a running perchd passes its mounts to the next one over a
// unix socket (issue 31; docs/design.md "Restart and upgrade").
//
// The socket is <cache_dir>/handoff.sock: the cache directory is the
// daemon's own (0700), and a successor started with the same configuration
// finds it. The exchange, after the successor connects and says hello:
//
//   predecessor                          successor
//   stops reading /dev/fuse, drains,
//   keeps a copy of its listening
//   sockets, closes the cache, sockets
//   sends each mount's /dev/fuse fd  -->  opens the cache, sockets, ports
//   (SCM_RIGHTS) and SessionState,        (those it was handed: serves
//   and the listening sockets             them), adopts the sessions
//                                   <--   'K' (ready)
//   'A' (yours)                      -->  tells systemd it is the main
//                                         process now (MAINPID=, when
//                                   <--   run by it), 'M'
//   exits                                 serves
//
// Until it has sent 'A', the predecessor holds its own copy of every
// descriptor: if the successor fails or goes away before 'K', the
// predecessor opens everything again and serves on (the handoff is
// refused, the mount never broken). Requests that arrive meanwhile wait in
// the kernel.
//
// Only a process of the same user or root (SO_PEERCRED) is heard, on both
// sides: the successor checks who listens before it says hello.
//
// Thread-safety: Listener's methods from one thread; its callback runs on
// its own thread. The free functions block the caller.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/core/result.h"

namespace perch::handoff {

// One mount as it travels: where it is, its /dev/fuse descriptor (owned by
// whoever holds the struct), and its encoded fuse::SessionState. The
// listening sockets of the side servers travel the same way, so that their
// ports are never free during a handoff (a local user could take one):
// `mountpoint` is kListenerPrefix and the server's name ("listener:http"),
// `fd` the listening socket, `state` the address it listens for.
struct MountHandoff {
  std::string mountpoint;
  int fd = -1;
  std::string state;
};
inline constexpr std::string_view kListenerPrefix = "listener:";
inline bool IsListener(const MountHandoff& m) { return m.mountpoint.starts_with(kListenerPrefix); }

std::string SocketPath(const std::string& cache_dir);

// The predecessor's side: accepts successors; `on_request` gets the
// connection (its to close) of one that said hello.
class Listener {
 public:
  Listener() = default;
  ~Listener();  // Stop()
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  core::Status Start(const std::string& path, std::function<void(int conn)> on_request);
  // Stops accepting and removes the socket. Idempotent.
  void Stop();

 private:
  void Loop();
  std::string path_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  std::function<void(int)> on_request_;
  std::thread thread_;
};

// Sends `mounts` (descriptors and states) on `conn`.
core::Status Send(int conn, const std::vector<MountHandoff>& mounts);
// Waits (until `deadline`) for the successor's 'K' and answers 'A': true if
// the successor now serves (then waits a little for its 'M', so that systemd
// hears of the new main process before this one exits); false if it failed,
// went away or took too long.
bool AwaitReady(int conn, std::chrono::steady_clock::time_point deadline);

// The successor's side: connects to the perchd serving at `path` and asks
// for its mounts; the connection, to pass to Receive and Confirm.
core::Result<int> Connect(const std::string& path);
// The mounts the predecessor sends (waits until `deadline`: it drains first).
core::Result<std::vector<MountHandoff>> Receive(int conn,
                                                std::chrono::steady_clock::time_point deadline);
// Says 'K' and waits for 'A': OK when the predecessor lets go; then runs
// `taken` (the caller tells systemd) and says 'M'.
core::Status Confirm(int conn, std::chrono::steady_clock::time_point deadline,
                     const std::function<void()>& taken);

}  // namespace perch::handoff
