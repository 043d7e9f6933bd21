// One client connection of the HTTP endpoint: reads requests (keep-alive),
// answers each from the mounts' filesystems, streams bodies copied from the
// block files or from the bytes a fetch returned. Internal to the endpoint.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "daemon/core/mutex.h"
#include "daemon/endpoint/http_endpoint.h"
#include "daemon/peers/connection_slots.h"
#include "daemon/peers/peer_credentials.h"

namespace perch::endpoint {

using peers::ConnectionSlots;
using peers::LoopbackPeer;
using peers::Peer;
using peers::PeerInGroup;

struct HttpEndpoint::Shared {
  Shared(core::CacheStack& s, core::OpMetrics& m, EndpointOptions o)
      : stack(s),
        metrics(m),
        options(o),
        slots(options.max_connections, options.max_connections_per_user) {}

  core::CacheStack& stack;
  core::OpMetrics& metrics;
  const EndpointOptions options;

  core::Mutex mu;
  core::CondVar idle;  // notified when a slot is released
  // Connections being served, by owner.
  ConnectionSlots slots PERCH_GUARDED_BY(mu);
  std::set<int> fds PERCH_GUARDED_BY(mu);  // their sockets (Shutdown cuts them)
  bool stopping PERCH_GUARDED_BY(mu) = false;
  std::set<std::string> labels PERCH_GUARDED_BY(mu);  // client labels counted so far

  // The counters of client label `label` (or of "other" once
  // options.max_client_labels labels exist).
  core::ClientCounters& Counters(const std::string& label);
};

// Serves connected socket `fd` of `peer` (nullopt: not known) until the
// client closes it, a request does not arrive in time, a socket wait times
// out, or Shutdown cuts it. Does not close `fd`.
void ServeConnection(HttpEndpoint::Shared& shared, int fd, std::optional<Peer> peer);

// Sends a short plain-text answer (`status` such as "503 Service
// Unavailable", `headers` as "Name: value\r\n" lines, `text`) with
// Connection: close, without waiting: what the socket does not take at once
// is dropped. For refusals and timeouts, where a client that reads nothing
// must not hold the thread.
void SendAndForget(int fd, std::string_view status, std::string_view headers,
                   std::string_view text);

}  // namespace perch::endpoint
