// HttpEndpoint: perchd's HTTP face for clients that do not read files
// through the mount: containers without /dev/fuse, curl and wget, Python's
// fsspec, Pelican's client (pointed at perchd as its cache), HTCondor's
// transfer plugin (perch-transfer). Off unless configured (`http =
// "127.0.0.1:8480"`); loopback only unless opened on purpose.
//
//   GET/HEAD /<federation path>   an object (one byte range at most: 206,
//                                 416, Content-Range, ETag, Last-Modified);
//                                 a directory as an HTML index
//                                 with Want-Digest: a Digest header, the
//                                 object's digests as perch checked them
//                                 against its server's (DigestKeeper)
//   PROPFIND /<path> (Depth 0/1)  a WebDAV multistatus, XRootD's shape
//   GET /.perch/mounts            the federations served (JSON)
//
// Every answer comes from the mounts' core::FileSystem: the same cache,
// single-flight fetches, prefetch, deadlines and stats as the FUSE mount; a
// request for a path below no mount is 404. A protected namespace's bytes go
// to the users the mount would show them to (root, perchd's user, members of
// protected_group), told apart by the loopback peer's socket owner
// (peer_credentials.h); everyone else gets 403.
//
// Pelican's client asks for `X-Transfer-Status: true` with `TE: trailers`:
// such answers are chunked and end with an `X-Transfer-Status: 200: OK`
// trailer, or a 500 status when the body could not be finished, as XRootD's
// caches do.
//
// One thread per connection (blocking), at most `max_connections` at once:
// beyond that a client gets 503 at once. The node's users share them
// (issue 29): a connection is charged to the uid that owns its peer socket
// (unknown peers to one "unknown" owner), and one uid holding
// `max_connections_per_user` gets 503 for its next ones while the others are
// still served (connection_slots.h). A request (line, headers and body: at
// most 8 KiB of headers and 64 KiB of body) must arrive whole within
// `request_timeout` of the connection's start or of the previous answer's
// end, however slowly its bytes trickle in; else the connection ends, with a
// 408 unless it was an idle keep-alive one. Each wait while answering is
// bounded by `io_timeout`.
//
// Thread-safety: Start, Shutdown and Join from one thread; Start once.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "daemon/core/cache_stack.h"
#include "daemon/core/metrics.h"
#include "daemon/core/status.h"

namespace perch::endpoint {

struct EndpointOptions {
  size_t max_connections = 64;
  size_t max_connections_per_user = 16;  // of them, per peer uid; 1 to max_connections
  int restricted_gid = -1;               // protected_group's gid; -1: root and perchd's user only
  std::chrono::milliseconds request_timeout{10000};  // a whole request (idle keep-alive included)
  std::chrono::milliseconds io_timeout{30000};       // per socket wait while answering
  size_t max_client_labels = 16;  // distinct User-Agent labels in stats, then "other"
};

class HttpEndpoint {
 public:
  HttpEndpoint(core::CacheStack& stack, core::OpMetrics& metrics, EndpointOptions options = {});
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Listens on "IP:PORT" (port 0: any free one; see address()).
  // kInvalidArgument for a bad address, a non-loopback one without
  // `allow_remote`, or one that cannot be bound.
  // With `listening` >= 0 (taken): that socket, already listening on
  // `address` (the previous perchd's, handed over), is served instead.
  core::Status Start(const std::string& address, bool allow_remote, int listening = -1);
  // "IP:PORT" listened on ("" before Start).
  const std::string& address() const { return address_; }
  // A duplicate (close-on-exec) of the listening socket for the next
  // perchd, so that the port is never free while this one shuts down:
  // connections wait in its backlog. -1 when not listening.
  int DupListener() const;

  // Stops accepting and cuts every open connection; returns at once.
  void Shutdown();
  // Waits for the connections' threads to end. Call after Shutdown, once
  // fetches can no longer block (the federation client has stopped).
  void Join();

  // Used by connections (http_endpoint.cc).
  struct Shared;

 private:
  // Serves listen_fd_ from the acceptor thread; sets address_.
  core::Status Serve();
  void AcceptLoop();

  std::shared_ptr<Shared> shared_;
  std::string address_;
  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};
  std::thread acceptor_;
};

}  // namespace perch::endpoint
