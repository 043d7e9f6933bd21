// DigestSlots: a bound on the digest requests (Want-Digest) in flight at one
// origin, shared by every net loop of a FederationClient.
//
// XRootD before 5.8 (Debian 12's 5.5.3) can crash when its table of running
// checksum jobs fills (`xrootd.chksum max N`; xrootd/xrootd#2534), and a
// cache relays a digest request to its origin, so every cache of a namespace
// adds to the origin's count. perch therefore keeps at most `per_origin`
// digest requests out per namespace (one origin exports a namespace; the
// requests to its caches count too). A request past the bound waits for a
// slot; the read it belongs to goes on fetching its bytes meanwhile, so a
// bound of a few checksum jobs is not a bound of a few reads.
//
// Thread-safety: safe from any thread. `go` runs on the thread that frees a
// slot (or the caller's, when one is free at once): it must only post work
// to its own loop.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <string>

#include "daemon/core/mutex.h"

namespace perch::http {

class DigestSlots {
 public:
  explicit DigestSlots(size_t per_origin) : per_origin_(per_origin == 0 ? 1 : per_origin) {}

  // Runs `go` once one of `origin`'s slots is this caller's; the caller
  // gives it back with Release(origin), whatever became of the request.
  void Acquire(const std::string& origin, std::function<void()> go);
  void Release(const std::string& origin);

  size_t per_origin() const { return per_origin_; }
  // Requests out and waiting for `origin` (for tests and stats).
  size_t InFlight(const std::string& origin);

 private:
  struct Origin {
    size_t in_flight = 0;
    std::deque<std::function<void()>> waiting;
  };
  const size_t per_origin_;
  core::Mutex mu_;
  std::map<std::string, Origin> origins_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::http
