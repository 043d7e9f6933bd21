// FederationClient: a core::Origin over a Pelican federation.
//
// It discovers the federation's director, asks the director which servers
// hold a namespace, remembers the answer per namespace prefix, lists and
// stats through WebDAV PROPFIND on the namespace's collections URL (the
// origin; caches do not list) and reads byte ranges from the caches the
// director named, failing over down that list and resuming at the first
// missing byte. See docs/protocol.md §2-§6.
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
// Parts, each with one job: DirectorClient (discovery, director answers, the
// namespace table), RangeReader (Range GETs with failover and resume, policy
// in failover.h), Lister (PROPFIND), NamespaceAuth (tokens).
//
// Shards: given several CurlLoops (perchd's `net_threads`), the client keeps
// one shard per loop: its own DirectorClient (discovery, namespace list),
// RangeReader and Lister, all on that loop's thread; only the director's
// answers (NamespaceAnswers, locked) are shared, so that one shard's answer
// serves every shard. A read goes to
// the shard of its path (the same file always to the same one); Stat and List
// go to the first. Each shard learns a failing server by itself: with N shards
// a dead cache may cost N failovers.
//
// Thread-safety: all public methods are safe from any thread; a shard's state
// lives on its CurlLoop's thread. Callbacks run on the thread of the shard
// that served the call.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/origin.h"
#include "daemon/http/client_context.h"
#include "daemon/http/curl_loop.h"
#include "daemon/http/url.h"

namespace perch::http {

class DirectorClient;
class NamespaceAnswers;
class Lister;
class RangeReader;

class FederationClient : public core::Origin {
 public:
  // One shard per loop of `loops` (not empty; each outlives this client).
  FederationClient(const std::vector<CurlLoop*>& loops, FederationUrl url,
                   FederationClientOptions options = {});
  FederationClient(CurlLoop& loop, FederationUrl url, FederationClientOptions options = {})
      : FederationClient(std::vector<CurlLoop*>{&loop}, std::move(url), std::move(options)) {}
  ~FederationClient() override;

  void Stat(const core::ObjectPath& path, core::Deadline deadline,
            std::function<void(core::Result<core::FileAttr>)> done) override;
  void List(const core::ObjectPath& path, core::Deadline deadline,
            std::function<void(core::Result<std::vector<core::DirEntry>>)> done) override;
  void ReadRange(const core::ObjectPath& path, const core::ObjectVersion& version,
                 core::ByteRange range, core::Deadline deadline,
                 std::function<void(core::Result<core::FetchedBytes>)> done) override;
  // The object's digest as a server that did not send this process its
  // bytes states it (RangeReader::Vouch: the other named servers, then the
  // origins; the origins first for a copy of unknown senders), within the
  // bound of digest requests per origin. kNotFound when none states one.
  void Digests(const core::ObjectPath& path, const core::ObjectVersion& version,
               const std::vector<std::string>& algorithms, core::Deadline deadline,
               std::function<void(core::Result<std::vector<core::ObjectDigest>>)> done) override;
  // Reads of `path` go to its origins first for a while (RangeReader::Distrust).
  void Distrust(const core::ObjectPath& path) override;
  void Blame(const core::ObjectPath& path) override;
  // The namespace the director named for `path` (any shard's answer),
  // relative to this client's root; the root when none is known or the
  // namespace's root lies above this client's.
  core::ObjectPath NamespaceOf(const core::ObjectPath& path) const override;

  const FederationUrl& url() const { return url_; }
  // Every shard's counters summed, at one moment.
  FederationCounters::Values counters() const;
  // Every shard's ServerTally summed, by server.
  std::map<std::string, ServerTally::Counts> servers() const;

  // The server (scheme://host:port) that last delivered bytes of `path`;
  // "" if none has since start.
  std::string LastServer(const core::ObjectPath& path) const;

  // Called on the loop thread after each accepted body chunk of a range GET,
  // with the server URL and the bytes of the current read received so far.
  void SetProgressHookForTest(std::function<void(const std::string& url, uint64_t bytes)> hook);

  // Forgets director answers and the discovery document (next call re-asks).
  void InvalidateForTest();

 private:
  // The parts of one loop. Shared with that loop thread's tasks, which may
  // outlive this object (a transfer cancelled when the CurlLoop shuts down
  // still completes).
  struct Shard {
    CurlLoop* loop;
    std::shared_ptr<ClientContext> ctx;
    std::shared_ptr<DirectorClient> director;
    std::shared_ptr<RangeReader> reader;
    std::shared_ptr<Lister> lister;
  };

  core::ObjectPath ToFederation(const core::ObjectPath& rel) const;
  // The shard that reads the federation path `fed`.
  const Shard& ReaderOf(const core::ObjectPath& fed) const;

  FederationUrl url_;
  std::shared_ptr<NamespaceAnswers> answers_;  // every shard's director answers
  std::vector<Shard> shards_;                  // constant after construction
};

}  // namespace perch::http
