// DigestSlots: a bound on the digest requests (Want-Digest) in flight, per
// namespace and per server, shared by every net loop of a FederationClient.
//
// XRootD before 5.8 (Debian 12's 5.5.3) computes a digest it has not stored
// in a checksum job whose answer travels back through its HTTP bridge, and
// that path crashes it (SIGSEGV): two such requests at once at one server
// kill it within a few hundred (docs/quirks.md, bench/xrootd-digests.sh);
// and when its table of running checksum jobs fills (`xrootd.chksum max N`)
// removing an entry reads past it (xrootd/xrootd#2534). A cache relays a
// digest request to its origin, so every cache of a namespace adds to the
// origin's count. perch therefore keeps at most `per_server` (1) digest
// requests out at any one server and `per_namespace` (3) per namespace (one
// origin exports a namespace; the requests to its caches count too). A
// request past a bound waits for a slot; the read it belongs to goes on
// fetching its bytes meanwhile, so a bound of a few checksum jobs is not a
// bound of a few reads. A request that ended without an answer (a deadline,
// a dropped connection) may still be computing at its server: its caller
// gives the slot back only once that server may have finished (Release's
// `after`).
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
  struct Key {
    std::string ns;      // the namespace's prefix: its origin counts every request
    std::string server;  // the server asked
  };

  DigestSlots(size_t per_namespace, size_t per_server)
      : per_namespace_(per_namespace == 0 ? 1 : per_namespace),
        per_server_(per_server == 0 ? 1 : per_server) {}

  // Runs `go` once a slot of `key.ns` and one of `key.server` are this
  // caller's; the caller gives them back with Release(key), whatever became
  // of the request.
  void Acquire(const Key& key, std::function<void()> go);
  void Release(const Key& key);

  size_t per_namespace() const { return per_namespace_; }
  size_t per_server() const { return per_server_; }
  // Requests out for a namespace and at a server (for tests and stats).
  size_t InFlight(const std::string& ns);
  size_t InFlightAt(const std::string& server);

 private:
  struct Namespace {
    size_t in_flight = 0;
    size_t waiting_count = 0;
    std::map<std::string, std::deque<std::function<void()>>> waiting;  // per server, in order
  };
  // Takes the first waiter of `n` whose server has room, counting it out.
  std::function<void()> NextLocked(Namespace& n) PERCH_REQUIRES(mu_);

  const size_t per_namespace_;
  const size_t per_server_;
  core::Mutex mu_;
  std::map<std::string, Namespace> namespaces_ PERCH_GUARDED_BY(mu_);
  std::map<std::string, size_t> servers_ PERCH_GUARDED_BY(mu_);  // requests out per server
};

}  // namespace perch::http
