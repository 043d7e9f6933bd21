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
// break or corrupt a fraction of the response bodies it carries and add a
// header to its responses (faults.h), each proxy as its own options say;
// a link with no delay and no rate limit is just that.
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
  // `rate_mbit` 0 = unlimited. `seed` makes the fault draws of all its
  // proxies repeatable.
  WanLink(std::chrono::microseconds one_way_delay, double rate_mbit, uint64_t seed = 0);
  ~WanLink();
  WanLink(const WanLink&) = delete;
  WanLink& operator=(const WanLink&) = delete;

  // A proxy to 127.0.0.1:`port` through this link; returns its port (0 on
  // error, with `err`). It does `responses` to the server's responses
  // (nothing by default: the bytes pass untouched).
  int AddProxy(int port, std::string* err, ResponseOptions responses = {});
  void Stop();

  // What the proxies with response options did so far, all together.
  const FaultCounters& fault_counters() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace perch::devfed
