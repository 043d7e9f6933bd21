// Building perchd's stack from its configuration: the cache's options, the
// network loops, and for each mount a Federation (its client, its part of the
// stack, its FUSE session). Called from the main thread while perchd starts;
// nothing here serves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/core/cache_stack.h"
#include "daemon/core/node_control.h"
#include "daemon/http/curl_loop.h"
#include "daemon/http/federation_client.h"
#include "fuse/fuse_server.h"
#include "perchd/handoff.h"

namespace perch {

// One federation mounted: its client, its part of the stack, its FUSE session.
struct Federation {
  MountConfig cfg;
  http::FederationUrl url;
  std::unique_ptr<http::FederationClient> client;
  core::Mount* mount = nullptr;
  std::unique_ptr<fuse::FuseServer> server;
};

// The size and free space of the file system holding `dir`.
core::Status DiskSpace(const std::string& dir, uint64_t* total, uint64_t* free);

// Hands the allocator's free pages back to the system: after the catalog's load and
// after the start-up walk, which free about as much as they keep (issue 14).
void ReleaseFreeMemory();

core::StackOptions StackOptionsOf(const DaemonConfig& cfg);

// The network loops: each client has a shard on every one (FederationClient),
// and reads spread over them by path. The request budget and the connections
// per server are shared out, so that N loops open no more than one would.
std::vector<std::unique_ptr<http::CurlLoop>> NetLoopsOf(const DaemonConfig& cfg);

// Parses and checks every mount's URL and mountpoint (before anything starts).
// A mount in `inherited` is the previous perchd's, live: not checked (its
// session is adopted).
core::Result<std::vector<std::unique_ptr<Federation>>> PrepareMounts(
    const DaemonConfig& cfg, const std::vector<handoff::MountHandoff>& inherited);

// Adds `f` to the stack over its own client, and checks that it can serve.
core::Status AddMount(const DaemonConfig& cfg, const std::vector<http::CurlLoop*>& loops,
                      core::CacheStack& stack, Federation& f);

// The FUSE options every mount shares (`stack` and `ops` must outlive them).
core::Result<fuse::FuseOptions> FuseOptionsOf(const DaemonConfig& cfg, core::CacheStack& stack,
                                              core::OpMetrics& ops);

// Gives `f` its FUSE session (not mounted yet) over `shared` options.
void AddFuseServer(const fuse::FuseOptions& shared, Federation& f);

// Sums the federation clients' counters and the net loops' queues (shared by the clients).
core::NetworkStats NetworkOf(const std::vector<std::unique_ptr<Federation>>& feds,
                             const std::vector<http::CurlLoop*>& loops);

}  // namespace perch
