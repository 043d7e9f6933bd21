// WanLink and WanProxy: an emulated wide-area link between perch and the
// local federation, for benchmarks where the kernel offers no netem.
//
// A WanLink is one shared link: bytes queue for its rate (each direction on
// its own, like a full-duplex line) and then take `one_way_delay` to arrive.
// Each WanProxy listens on 127.0.0.1 and forwards every connection to one
// server through the link, so that a client of the proxy sees the RTT and
// the bandwidth of a WAN path while the servers behind it talk to each other
// directly. Per connection, byte order is kept; a sender is slowed (TCP
// back-pressure) when more than 4 MiB wait for the link. A proxy may also
// break a fraction of the response bodies it carries (faults.h).
//
// Thread-safety: everything runs on the link's own Asio thread; Start and
// Stop from one thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "devfed/faults.h"

namespace perch::devfed {

class WanLink {
 public:
  // `rate_mbit` 0 = unlimited. `faults`: what proxies made with faults=true
  // do to response bodies; `seed` makes the draws repeatable.
  WanLink(std::chrono::microseconds one_way_delay, double rate_mbit, FaultOptions faults = {},
          uint64_t seed = 0);
  ~WanLink();
  WanLink(const WanLink&) = delete;
  WanLink& operator=(const WanLink&) = delete;

  // A proxy to 127.0.0.1:`port` through this link; returns its port (0 on
  // error, with `err`). `faults`: it breaks response bodies as configured.
  int AddProxy(int port, std::string* err, bool faults = false);
  void Stop();

  // What the proxies made with faults=true did so far.
  const FaultCounters& fault_counters() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace perch::devfed
