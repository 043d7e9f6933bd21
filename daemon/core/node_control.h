// NodeControl: what the control plane (gRPC, Prometheus) may see and do on
// this node, gathered in one place so that the adapters only translate:
// counters and histograms as one snapshot, warm / pin / unpin / evict / list
// by path, and a health report that asks the federation itself.
//
// Several mounts share one node (one CacheStack): counters are summed over
// them, namespaces and health are per mount, and every command works on
// paths of any mount.
//
// Paths. Users name things the way they see them: a path inside a mount
// (/osdf/ns/data/x), a federation URL (osdf:///ns/data/x) or a federation
// path (/ns/data/x). Resolve() turns each into the catalog path of the mount
// that holds it (Mount::CatalogPath), or explains why it cannot: a
// federation path two mounts of different federations hold is ambiguous.
//
// Thread-safety: all methods are safe from any thread and never wait on the
// data path: Health answers through a callback, Warm runs on the Warmer's
// executor, the rest touch only in-memory state and the index.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/core/block_reader.h"
#include "daemon/core/cache_catalog.h"
#include "daemon/core/cache_stack.h"
#include "daemon/core/metrics.h"
#include "daemon/core/mutex.h"
#include "daemon/core/origin.h"
#include "daemon/core/prefetcher.h"
#include "daemon/core/warmer.h"

namespace perch::core {

// What one server of the federations did wrong (message ServerStats).
struct ServerStats {
  std::string server;  // scheme://host:port
  uint64_t digest_mismatches = 0, failures = 0;

  // The numbers above by the control API's names.
  static constexpr auto Fields() {
    using Field = std::pair<std::string_view, uint64_t ServerStats::*>;
    return std::to_array<Field>({{"digest_mismatches", &ServerStats::digest_mismatches},
                                 {"failures", &ServerStats::failures}});
  }
};

// Counters of the federation client, filled by the daemon's wiring.
struct NetworkStats {
  uint64_t inflight_requests = 0;
  uint64_t queued_requests = 0;
  uint64_t range_gets = 0;
  uint64_t failovers = 0;
  uint64_t resumes = 0;
  uint64_t digests_verified = 0;
  uint64_t digest_mismatches = 0;
  uint64_t digests_unverified = 0;
  uint64_t digest_asks = 0;
  uint64_t origin_fallbacks = 0;
  std::vector<ServerStats> servers;  // by server, those that did something wrong
};

struct NamespaceCounters {
  std::string federation;  // the mount's federation URL
  std::string path;        // federation path of the namespace
  ReadCounters::Values values;
};

struct ClientStats {
  std::string client;  // User-Agent product ("curl", "python-requests", ...)
  uint64_t requests = 0, bytes = 0, errors = 0;

  // The numbers above by the control API's names (message HttpClientStats).
  static constexpr auto Fields() {
    using Field = std::pair<std::string_view, uint64_t ClientStats::*>;
    return std::to_array<Field>({{"requests", &ClientStats::requests},
                                 {"bytes", &ClientStats::bytes},
                                 {"errors", &ClientStats::errors}});
  }
};

// Everything the node counts, at one moment. The control plane shows it
// through the control API's Stats message, which the adapter fills by the
// names ForEachNumber gives; Prometheus and perchctl walk that message. So a
// counter is added here (a field and its line in ForEachNumber) and in
// proto/perch.proto (a field of that name, with its help), and nowhere else;
// a name without a field, or a field without a name, fails control's tests.
struct StatsSnapshot {
  ReadCounters::Values totals;  // summed over every mount
  uint64_t shared_fetches = 0;
  uint64_t corrupt_blocks = 0;
  uint64_t store_errors = 0;
  uint64_t whole_files = 0;
  uint64_t uncacheable_blocks = 0;
  uint64_t version_checks = 0;       // VersionGuard::confirmations
  uint64_t versions_replaced = 0;    // VersionGuard::replacements
  uint64_t revalidations = 0;        // NamespaceCache::revalidations (Cache-Control lifetimes)
  uint64_t revalidated_changes = 0;  // NamespaceCache::revalidated_changes
  struct {
    uint64_t bytes = 0, corrupt_blocks = 0, digest_mismatches = 0, digests_verified = 0;
    uint64_t passes = 0;
  } scrub;                                    // the background scrub and verify jobs (Scrubber)
  uint64_t digest_asks = 0;                   // DigestKeeperStats::asks
  uint64_t digests_handed_out = 0;            // DigestKeeperStats::verified
  uint64_t digest_cache_mismatches = 0;       // DigestKeeperStats::mismatches
  std::vector<NamespaceCounters> namespaces;  // add up to totals
  uint64_t cached_bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t pinned_bytes = 0;
  uint64_t cached_blocks = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  NetworkStats network;
  std::vector<std::pair<std::string, uint64_t>> errors;  // by class
  std::vector<std::pair<std::string, LatencyHistogram::Snapshot>> fuse_ops;
  std::vector<ClientStats> http_clients;  // the HTTP endpoint's requests, by client
  struct {
    uint64_t refused_per_user = 0, request_timeouts = 0;
  } http_endpoint;
  LatencyHistogram::Snapshot origin_get;
  std::vector<WarmProgress> warm_jobs;
  struct {
    uint64_t sequential_blocks = 0, directory_files = 0, hinted_files = 0, withdrawn = 0;
    uint64_t directories_listed_ahead = 0;
  } prefetch;
  SchedulerStats scheduler;
  size_t budget_requests = 0;
  bool offline = false;  // some mount serves stale entries
  uint64_t uptime_seconds = 0;

  // Calls fn(name, value) for every single number above, `value` a reference
  // (const when `s` is) to a uint64_t, size_t or bool; `name` is the field of
  // message Stats ("prefetch.hinted_files": field hinted_files of field
  // prefetch). The per-namespace and per-client numbers have their own
  // Fields() lists; histograms, errors and warm jobs are copied as a whole.
  template <typename Snapshot, typename Fn>
  static void ForEachNumber(Snapshot& s, Fn&& fn) {
    for (const auto& [name, field] : ReadCounters::Values::Fields()) fn(name, s.totals.*field);
    fn("shared_fetches", s.shared_fetches);
    fn("corrupt_blocks", s.corrupt_blocks);
    fn("store_errors", s.store_errors);
    fn("whole_files", s.whole_files);
    fn("cached_bytes", s.cached_bytes);
    fn("capacity_bytes", s.capacity_bytes);
    fn("pinned_bytes", s.pinned_bytes);
    fn("cached_blocks", s.cached_blocks);
    fn("evictions", s.evictions);
    fn("evicted_bytes", s.evicted_bytes);
    fn("inflight_requests", s.network.inflight_requests);
    fn("queued_requests", s.network.queued_requests);
    fn("range_gets", s.network.range_gets);
    fn("failovers", s.network.failovers);
    fn("resumes", s.network.resumes);
    fn("offline", s.offline);
    fn("uptime_seconds", s.uptime_seconds);
    fn("prefetch.sequential_blocks", s.prefetch.sequential_blocks);
    fn("prefetch.directory_files", s.prefetch.directory_files);
    fn("prefetch.hinted_files", s.prefetch.hinted_files);
    fn("prefetch.withdrawn", s.prefetch.withdrawn);
    fn("prefetch.directories_listed_ahead", s.prefetch.directories_listed_ahead);
    fn("prefetch.max_in_flight_seen", s.scheduler.max_in_flight_seen);
    fn("prefetch.boosted", s.scheduler.boosted);
    fn("prefetch.budget_requests", s.budget_requests);
    for (size_t c = 0; c < kPriorityCount; ++c) {
      const std::string cls = ToString(static_cast<Priority>(c));
      fn("prefetch.queued_" + cls, s.scheduler.queued[c]);
      fn("prefetch.started_" + cls, s.scheduler.started[c]);
    }
    fn("http_endpoint.refused_per_user", s.http_endpoint.refused_per_user);
    fn("http_endpoint.request_timeouts", s.http_endpoint.request_timeouts);
    fn("digests_verified", s.network.digests_verified);
    fn("digest_mismatches", s.network.digest_mismatches);
    fn("origin_fallbacks", s.network.origin_fallbacks);
    fn("uncacheable_blocks", s.uncacheable_blocks);
    fn("version_checks", s.version_checks);
    fn("versions_replaced", s.versions_replaced);
    fn("revalidations", s.revalidations);
    fn("revalidated_changes", s.revalidated_changes);
    fn("scrubbed_bytes", s.scrub.bytes);
    fn("scrub_corrupt_blocks", s.scrub.corrupt_blocks);
    fn("scrub_digest_mismatches", s.scrub.digest_mismatches);
    fn("scrub_digests_verified", s.scrub.digests_verified);
    fn("scrub_passes", s.scrub.passes);
    fn("digest_asks", s.digest_asks);
    fn("digests_handed_out", s.digests_handed_out);
    fn("digest_cache_mismatches", s.digest_cache_mismatches);
    fn("digests_unverified", s.network.digests_unverified);
  }
};

struct NamespaceHealth {
  std::string federation;  // the mount's federation URL
  std::string path;        // federation path
  bool reachable = false;
  std::chrono::milliseconds latency{0};
  std::string error;
};

struct MountHealth {
  std::string mountpoint;
  std::string federation_url;
  bool mounted = false;
  bool offline = false;
  bool healthy = false;  // mounted and every namespace of it reachable
};

struct HealthReport {
  std::vector<MountHealth> mounts;
  std::vector<NamespaceHealth> namespaces;  // of every mount
  std::string cache_dir;
  uint64_t cache_capacity_bytes = 0;
  uint64_t cache_used_bytes = 0;
  uint64_t disk_total_bytes = 0;
  uint64_t disk_free_bytes = 0;
  std::string disk_error;      // "" when statvfs worked
  std::string store_error;     // "" unless block writes failed lately (CacheCatalog::StoreProblem)
  std::string listener_error;  // "" unless a side listener (metrics, http) could not be had
  bool healthy = false;        // every mount healthy, disk readable with free space, store fine
};

class NodeControl {
 public:
  using NetworkStatsFn = std::function<NetworkStats()>;
  using DiskSpaceFn = std::function<Status(uint64_t* total, uint64_t* free)>;

  // Over every mount of `stack` (also those added later). `network` and
  // `disk` may be empty. Commands' disk work (Evict) runs on stack.jobs().
  NodeControl(CacheStack& stack, std::string cache_dir, const OpMetrics& ops,
              NetworkStatsFn network = nullptr, DiskSpaceFn disk = nullptr);

  // The catalog path (see Mount::CatalogPath) that `user_path` names.
  // kInvalidArgument when no mount holds it, or when it is ambiguous.
  Result<ObjectPath> Resolve(std::string_view user_path) const;
  // The path users see for catalog path `p`: the federation path (`p`
  // itself when it is of no mount).
  std::string FederationPath(const ObjectPath& p) const;
  // The federation URL of the mount of catalog path `p` ("" if none).
  std::string FederationOf(const ObjectPath& p) const;

  StatsSnapshot Stats() const;

  // A side listener (the metrics port, the HTTP endpoint, a TCP control
  // port) that could not be had: the mounts serve without it, and Health
  // says so (not healthy) for the rest of the run.
  void NoteListenerProblem(const std::string& why);

  // Asks each federation about its mounted prefix and every namespace read
  // so far (at most 16 per mount), in parallel, each within `timeout`.
  void Health(std::chrono::milliseconds timeout, std::function<void(HealthReport)> done);

  // Evicts everything cached below catalog path `path` on the job executor
  // (disk work) and calls `done` there.
  void Evict(const ObjectPath& path, std::function<void(Result<EvictResult>)> done);

  // Starts warming catalog paths `paths`, which must lie under one mount.
  Result<std::shared_ptr<WarmJob>> Warm(const std::vector<ObjectPath>& paths, bool recursive,
                                        Warmer::UpdateFn on_update);

  // Starts checking every cached block below catalog path `path` (the root:
  // everything) against its CRC32C, and whole objects against their digest
  // where one is recorded (Scrubber::Verify).
  std::shared_ptr<ScrubJob> Verify(const ObjectPath& path, Scrubber::UpdateFn on_update);

  // Resolves `paths` and hands each mount's to its prefetcher as job `job`'s
  // list; returns (accepted, rejected). kInvalidArgument without prefetch.
  Result<std::pair<uint64_t, uint64_t>> Hint(const std::string& job,
                                             const std::vector<std::string>& paths);

  // The cached objects below catalog path `prefix`, in path order, after
  // path `after` ("" from the start), at most `limit`.
  std::vector<CachedObject> ListCached(const ObjectPath& prefix, const std::string& after,
                                       size_t limit) const {
    return stack_.catalog().List(prefix, after, limit);
  }
  // Pins (keeps from eviction) everything below catalog path `prefix`, or
  // lifts such a pin (kNotFound if there is none); Pins lists them all.
  Status Pin(const ObjectPath& prefix) { return stack_.catalog().Pin(prefix); }
  Status Unpin(const ObjectPath& prefix) { return stack_.catalog().Unpin(prefix); }
  std::vector<ObjectPath> Pins() const { return stack_.catalog().Pins(); }

  CacheStack& stack() { return stack_; }

 private:
  CacheStack& stack_;
  const std::string cache_dir_;
  const OpMetrics& ops_;
  const NetworkStatsFn network_;
  const DiskSpaceFn disk_;
  const Clock::time_point started_ = Clock::now();
  mutable Mutex mu_;
  std::string listener_problem_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::core
