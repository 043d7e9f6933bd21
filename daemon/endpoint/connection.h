// One client connection of the HTTP endpoint: reads requests (keep-alive),
// answers each from the mounts' filesystems, streams bodies copied from the
// block files or from the bytes a fetch returned. Internal to the endpoint.
#pragma once

#include <condition_variable>
#include <mutex>
#include <set>
#include <string>

#include "daemon/endpoint/http_endpoint.h"

namespace perch::endpoint {

struct HttpEndpoint::Shared {
  Shared(core::CacheStack& s, core::OpMetrics& m, EndpointOptions o)
      : stack(s), metrics(m), options(o) {}

  core::CacheStack& stack;
  core::OpMetrics& metrics;
  const EndpointOptions options;

  std::mutex mu;
  std::condition_variable idle;  // notified when `active` drops
  size_t active = 0;             // Protected by mu: connections being served
  std::set<int> fds;             // Protected by mu: their sockets (Shutdown cuts them)
  bool stopping = false;         // Protected by mu
  std::set<std::string> labels;  // Protected by mu: client labels counted so far

  // The counters of client label `label` (or of "other" once
  // options.max_client_labels labels exist).
  core::ClientCounters& Counters(const std::string& label);
};

// Serves connected socket `fd` until the client closes it, a socket wait
// times out, or Shutdown cuts it. Does not close `fd`.
void ServeConnection(HttpEndpoint::Shared& shared, int fd);

}  // namespace perch::endpoint
