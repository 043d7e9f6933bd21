// DirectorClient: which servers hold a federation path, and under which
// namespace rules (docs/protocol.md §2-§3).
//
// It finds the director through the federation's discovery document, asks it
// about an object (GET without following the 307) and keeps each answer for
// every object below the answer's namespace prefix (the longest prefix wins,
// so nested namespaces such as /a and /a/b each keep their own servers,
// tokens rules and listings URL). Concurrent questions about one path share
// one director query.
//
// The last resort for reads is the origin: when every server the director
// named has failed, ResolveDirect asks again with Pelican's `?directread`,
// which names the namespace's origins when it and they have the DirectReads
// capability and answers 405 otherwise. Both answers are kept per namespace
// for namespace_ttl, so that the director is asked once, not per read.
//
// Thread-safety: every method runs on the CurlLoop's thread; callbacks too.
// The answers themselves (NamespaceAnswers) may be shared by the clients of
// several loops (FederationClient's shards), so that one shard's answer
// serves the others' reads.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/mutex.h"
#include "daemon/core/result.h"
#include "daemon/core/types.h"
#include "daemon/http/client_context.h"
#include "daemon/http/namespace_directory.h"

namespace perch::http {

// One director answer, valid for every object below `prefix` until `expires`.
struct NamespaceEntry {
  core::ObjectPath prefix;  // federation path of the namespace
  bool require_token = false;
  std::string collections_url;            // origin base for PROPFIND ("" = no listings)
  std::vector<std::string> server_bases;  // URL of the namespace root on each server, best first
  std::vector<std::string> issuers;
  core::Clock::time_point expires;
  bool cacheable = true;  // false when the Link URLs could not be generalised

  // URL of federation object `path` (below prefix) on server i.
  std::string ServerUrl(size_t i, const core::ObjectPath& path) const;
};

// Interprets a director's answer about `fed_path` (no I/O). A usable answer
// has a namespace entry with at least one server; 404 is kNotFound, 401/403/
// 405 kPermissionDenied, 429/5xx kUnavailable (retryable), anything malformed
// kCorrupt. Link URLs are matched against the object's path whether the
// director escaped them like perch or like Go's url.URL (which leaves
// `$&+,:;=@` as they are), so one answer serves the whole namespace.
core::Result<std::shared_ptr<const NamespaceEntry>> ParseDirectorAnswer(
    const core::ObjectPath& fed_path, const HttpResponse& answer, size_t max_servers,
    core::Clock::time_point expires);

// Director answers by namespace prefix (cacheable ones only), for every
// object below their prefix until they expire, and the answers to
// `?directread` (origins, or a refusal) by the prefix of the namespace they
// were asked for. Thread-safe: the DirectorClients of one FederationClient's
// shards share one.
class NamespaceAnswers {
 public:
  // The unexpired answer with the longest prefix holding `fed_path`; null if
  // none (expired answers are dropped on the way).
  std::shared_ptr<const NamespaceEntry> Longest(const core::ObjectPath& fed_path);
  void Put(std::shared_ptr<const NamespaceEntry> entry);
  // The longest namespace prefix any answer named (expired ones too: a
  // namespace does not move) that equals or holds `fed_path`; nullopt if none.
  std::optional<core::ObjectPath> Named(const core::ObjectPath& fed_path);
  // Forgets `entry` if it is still the answer, or the direct-read answer, for its prefix.
  void Erase(const std::shared_ptr<const NamespaceEntry>& entry);
  // Forgets every answer, direct-read ones included.
  void Clear();

  // What the director said about direct reads in namespace `prefix`: its
  // origins (`entry`), or a refusal (`refusal` not ok). Both empty when it
  // has not been asked, or that answer expired.
  struct Direct {
    std::shared_ptr<const NamespaceEntry> entry;
    core::Status refusal;
  };
  Direct GetDirect(const std::string& prefix);
  // Keeps `direct` for namespace `prefix` until `expires`; true when no
  // unexpired answer was kept before (the caller logs the news once).
  bool PutDirect(const std::string& prefix, Direct direct, core::Clock::time_point expires);

 private:
  struct KeptDirect {
    Direct direct;
    core::Clock::time_point expires;
  };
  core::Mutex mu_;
  std::map<std::string, std::shared_ptr<const NamespaceEntry>> by_prefix_ PERCH_GUARDED_BY(mu_);
  std::map<std::string, KeptDirect> direct_ PERCH_GUARDED_BY(mu_);
  std::set<std::string> named_ PERCH_GUARDED_BY(mu_);  // at most NamespaceDirectory::kMaxPrefixes
};

class DirectorClient : public std::enable_shared_from_this<DirectorClient> {
 public:
  using NsCallback = std::function<void(core::Result<std::shared_ptr<const NamespaceEntry>>)>;

  // `answers`: shared with the DirectorClients of other loops (a new table of its own if null).
  explicit DirectorClient(std::shared_ptr<ClientContext> ctx,
                          std::shared_ptr<NamespaceAnswers> answers = nullptr)
      : ctx_(std::move(ctx)),
        answers_(answers ? std::move(answers) : std::make_shared<NamespaceAnswers>()) {}

  // The namespace entry for federation path `fed_path`: from the table, or
  // asked of the director (kNotFound when no namespace holds the path).
  // `fresh` asks the director even when the table has an answer (a path
  // that every server of its table entry says is missing may belong to a
  // nested namespace the director did not list).
  void Resolve(const core::ObjectPath& fed_path, core::Deadline deadline, NsCallback done,
               bool fresh = false);

  // The servers that serve `fed_path` without a cache: the director asked
  // again with `?directread`, for a read whose every named server failed.
  // `ns` is the path's entry from Resolve. The answer is kept for ns's
  // namespace until namespace_ttl, and so is a refusal: 405 (the namespace
  // or its origins lack DirectReads) is kPermissionDenied, answered again
  // from the table without asking. Other errors (404, 429, 5xx, transport)
  // are the director's usual ones (ParseDirectorAnswer) and are not kept.
  // Concurrent questions about one path share one query.
  void ResolveDirect(const std::shared_ptr<const NamespaceEntry>& ns,
                     const core::ObjectPath& fed_path, core::Deadline deadline, NsCallback done);

  // What ResolveDirect would answer from the table for ns's namespace (no
  // I/O): the kept origins or refusal, or both empty.
  NamespaceAnswers::Direct KeptDirect(const NamespaceEntry& ns) {
    return answers_->GetDirect(ns.prefix.str());
  }

  // Forgets `entry` (its servers all failed, or a listing's origin moved).
  void Invalidate(const std::shared_ptr<const NamespaceEntry>& entry);

  // Forgets every answer and the discovery document.
  void InvalidateAll();

  // Makes sure the director's list of namespaces is fresh (fetched at most
  // once per namespace_ttl; a failure is remembered for
  // discovery_failure_ttl), then calls `done` with the outcome. The
  // directory holds whatever is known either way.
  void WithNamespaces(core::Deadline deadline, std::function<void(core::Status)> done);
  const NamespaceDirectory& directory() const { return directory_; }

 private:
  std::shared_ptr<const NamespaceEntry> Lookup(const core::ObjectPath& fed_path);
  void WithDirector(core::Deadline deadline, std::function<void(core::Result<std::string>)> done);
  void Discover(core::Deadline deadline, int attempt);
  void FetchNamespaceList(const std::string& director, int version, core::Deadline deadline,
                          std::function<void(core::Status)> finish);
  void FinishDiscovery(core::Result<std::string> result);
  void Query(const std::string& director, const core::ObjectPath& fed_path, core::Deadline deadline,
             int attempt);
  void FinishResolve(const core::ObjectPath& fed_path,
                     core::Result<std::shared_ptr<const NamespaceEntry>> r);
  void QueryDirect(const std::string& director, const std::string& prefix,
                   const core::ObjectPath& fed_path, core::Deadline deadline);
  void FinishDirect(const std::string& prefix, const core::ObjectPath& fed_path,
                    core::Result<std::shared_ptr<const NamespaceEntry>> r);

  std::shared_ptr<ClientContext> ctx_;
  std::string director_;
  core::Clock::time_point director_expires_;
  core::Status discovery_error_;
  core::Clock::time_point discovery_error_expires_;
  std::vector<std::function<void(core::Result<std::string>)>> discovery_waiters_;
  const std::shared_ptr<NamespaceAnswers> answers_;
  std::map<std::string, std::vector<NsCallback>> waiters_;
  std::map<std::string, std::vector<NsCallback>> direct_waiters_;  // by namespace prefix
  NamespaceDirectory directory_;
  core::Status list_status_ = core::UnavailableError("not fetched yet");
  core::Clock::time_point list_expires_;
  std::vector<std::function<void(core::Status)>> list_waiters_;
  bool list_warned_ = false;
};

// Maps an unexpected HTTP status from a server to a Status: 404 kNotFound,
// 401/403 kPermissionDenied, 416 kCorrupt, the rest kUnavailable. The body's
// JSON "msg" (or its start) is quoted.
core::Status StatusFromHttp(long code, const std::string& what, core::FailureSite site,
                            const std::string& body);

}  // namespace perch::http
