// FederationClient: a core::Origin over a Pelican federation.
//
// It discovers the federation's director, asks the director which servers
// hold a namespace, remembers the answer per namespace prefix, lists and
// stats through WebDAV PROPFIND on the namespace's collections URL (the
// origin; caches do not list) and reads byte ranges from the caches the
// director named, failing over down that list and resuming at the first
// missing byte. See shared/reference/pelican-protocol.md §2-§5.
//
// Paths given to this class are relative to the federation URL's path: with
// pelican://host/ns, Stat("/a") looks up the federation object /ns/a.
//
// Failure classes: a transport error, 5xx, wrong Content-Range or a short
// body is the *server's* failure: the next server is tried and the server is
// sorted last for `server_penalty`. 404/403 from every server is the
// object's answer (kNotFound / kPermissionDenied). When the list is
// exhausted the namespace entry is dropped, the director asked again once,
// and then the read fails with kUnavailable (retryable).
//
// Versions: XRootD's ETag is the serving host's file id, so two caches give
// different ETags for the same bytes. perch checks the object size on every
// 206 (Content-Range total) against the version it is reading, and the ETag
// only against earlier answers of the same server.
//
// Tokens: sent as "Authorization: Bearer" only when the director marks the
// namespace require-token=true, only to servers the director named, never to
// the director itself, and never logged.
//
// Thread-safety: all public methods are safe from any thread; all state lives
// on the CurlLoop's thread. Callbacks run on that thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/origin.h"
#include "daemon/http/curl_loop.h"
#include "daemon/http/token.h"
#include "daemon/http/url.h"

namespace perch::http {

struct FederationClientOptions {
  std::string token_file;  // explicit token location (step 0 of the search order)
  std::chrono::seconds namespace_ttl{300};        // director answers, per namespace prefix
  std::chrono::seconds discovery_ttl{1800};       // discovery document
  std::chrono::seconds discovery_failure_ttl{15}; // a failed discovery is remembered this long
  std::chrono::seconds server_penalty{30};        // a failed server sorts last this long
  std::chrono::seconds token_ttl{30};             // how long a found token is reused
  std::chrono::milliseconds connect_timeout{5000};
  long low_speed_bytes = 1024;                    // abort a transfer slower than this ...
  std::chrono::seconds low_speed_time{20};        // ... for this long
  int director_attempts = 4;                      // for 429 and proxy errors
  std::chrono::milliseconds director_backoff{1000};  // backoff unit: n * unit + unit
  size_t max_servers = 6;
};

// Monotonic counters; read from any thread.
struct FederationCounters {
  std::atomic<uint64_t> discovery_queries{0};
  std::atomic<uint64_t> director_queries{0};
  std::atomic<uint64_t> propfinds{0};
  std::atomic<uint64_t> range_gets{0};
  std::atomic<uint64_t> body_bytes{0};      // every body byte of a range GET that arrived
  std::atomic<uint64_t> bytes_delivered{0}; // bytes handed to callers
  std::atomic<uint64_t> failovers{0};       // moves to the next server after a failure
  std::atomic<uint64_t> resumes{0};         // attempts that started past the range's first byte
};

class FederationClient : public core::Origin {
 public:
  FederationClient(CurlLoop& loop, FederationUrl url, FederationClientOptions options = {});
  ~FederationClient() override;

  void Stat(const core::ObjectPath& path, core::Deadline deadline,
            std::function<void(core::Result<core::FileAttr>)> done) override;
  void List(const core::ObjectPath& path, core::Deadline deadline,
            std::function<void(core::Result<std::vector<core::DirEntry>>)> done) override;
  void ReadRange(const core::ObjectPath& path, const core::ObjectVersion& version,
                 core::ByteRange range, core::Deadline deadline,
                 std::function<void(core::Result<core::Bytes>)> done) override;

  const FederationUrl& url() const { return url_; }
  const FederationCounters& counters() const;

  // The server (scheme://host:port) that last delivered bytes of `path`;
  // "" if none has since start.
  std::string LastServer(const core::ObjectPath& path) const;

  // Called on the loop thread after each accepted body chunk of a range GET,
  // with the server URL and the bytes of the current read received so far.
  void SetProgressHookForTest(std::function<void(const std::string& url, uint64_t bytes)> hook);

  // Forgets director answers and the discovery document (next call re-asks).
  void InvalidateForTest();

 private:
  struct NamespaceEntry;
  struct ReadOp;
  class State;

  FederationUrl url_;
  CurlLoop& loop_;
  // Shared with the loop thread's tasks, which may outlive this object (a
  // transfer cancelled when the CurlLoop shuts down still completes).
  std::shared_ptr<State> state_;
};

}  // namespace perch::http
