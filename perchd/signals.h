// How perchd's main thread waits while the mounts serve. SIGTERM, SIGINT and
// SIGHUP end perchd; SIGUSR1 says that a mount's loop ended or that a
// successor asks for the mounts (HandoffRequests); SIGUSR2 wakes a FUSE
// loop so that it sees its exit flag. The signals are taken with sigwait on
// the main thread, never by a handler on another one: BlockSignals first,
// before any thread exists.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "daemon/core/status.h"
#include "perchd/stack.h"

namespace perch {

// Blocks perchd's signals in the calling thread and in every thread it starts.
void BlockSignals();

// A successor's connection, offered by the handoff listener's thread and
// taken by RunMounts on the main thread. Outlives the runs of one perchd: a
// connection offered while no run waits is taken by the next run.
class HandoffRequests {
 public:
  HandoffRequests() = default;
  HandoffRequests(const HandoffRequests&) = delete;
  HandoffRequests& operator=(const HandoffRequests&) = delete;
  ~HandoffRequests();

  // Keeps `conn` (closing one offered before and not taken) and tells the
  // main thread (SIGUSR1). Any thread.
  void Offer(int conn);
  // The connection offered, or -1; the caller owns it.
  int Take() { return conn_.exchange(-1); }

 private:
  std::atomic<int> conn_{-1};
};

// Serves every mount's FUSE session on its own thread until a signal
// (SIGTERM, SIGINT, SIGHUP), until one mount is unmounted, or until a
// successor asks for the mounts (`*handoff_conn` set: the loops ended
// without a request lost, for FuseServer::Detach); then ends them all.
// REQUIRES: BlockSignals() before any thread was started.
core::Status RunMounts(std::vector<std::unique_ptr<Federation>>& feds,
                       std::chrono::milliseconds op_timeout, HandoffRequests& requests,
                       int* handoff_conn);

}  // namespace perch
