// NodeControl: what the control plane (gRPC, Prometheus) may see and do on
// this node, gathered in one place so that the adapters only translate:
// counters and histograms as one snapshot, warm / pin / unpin / evict / list
// by path, and a health report that asks the federation itself.
//
// Paths. Users name things the way they see them: a path inside the mount
// (/osdf/ns/data/x), a federation URL (osdf:///ns/data/x) or a federation
// path (/ns/data/x). Resolve() turns each into the object path below the
// mounted prefix, or explains why it cannot.
//
// Thread-safety: all methods are safe from any thread and never wait on the
// data path: Health answers through a callback, Warm runs on the Warmer's
// executor, the rest touch only in-memory state and the index.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/block_reader.h"
#include "daemon/core/cache_catalog.h"
#include "daemon/core/metrics.h"
#include "daemon/core/origin.h"
#include "daemon/core/prefetcher.h"
#include "daemon/core/warmer.h"

namespace perch::core {

// Latency and errors of filesystem operations, filled by the FUSE adapter.
class OpMetrics {
 public:
  enum Op { kLookup, kGetAttr, kOpenDir, kReadDir, kOpen, kRead, kStatFs, kXattr, kCount };
  static const char* Name(Op op);
  LatencyHistogram& latency(Op op) { return latency_[op]; }
  const LatencyHistogram& latency(Op op) const { return latency_[op]; }
  ErrorCounters& errors() { return errors_; }
  const ErrorCounters& errors() const { return errors_; }

 private:
  std::array<LatencyHistogram, kCount> latency_;
  ErrorCounters errors_;
};

// Counters of the federation client, filled by the daemon's wiring.
struct NetworkStats {
  uint64_t inflight_requests = 0;
  uint64_t queued_requests = 0;
  uint64_t range_gets = 0;
  uint64_t failovers = 0;
  uint64_t resumes = 0;
};

struct StatsSnapshot {
  ReadCounters::Values totals;
  uint64_t shared_fetches = 0;
  uint64_t corrupt_blocks = 0;
  uint64_t store_errors = 0;
  std::vector<std::pair<std::string, ReadCounters::Values>> namespaces;
  uint64_t cached_bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t pinned_bytes = 0;
  uint64_t cached_blocks = 0;
  uint64_t evictions = 0;
  NetworkStats network;
  std::vector<std::pair<std::string, uint64_t>> errors;  // by class
  std::vector<std::pair<std::string, LatencyHistogram::Snapshot>> fuse_ops;
  LatencyHistogram::Snapshot origin_get;
  std::vector<WarmProgress> warm_jobs;
  struct {
    uint64_t sequential_blocks = 0, directory_files = 0, hinted_files = 0, withdrawn = 0;
  } prefetch;
  SchedulerStats scheduler;
  size_t budget_requests = 0;
  bool offline = false;
  uint64_t uptime_seconds = 0;
};

struct NamespaceHealth {
  std::string path;  // federation path
  bool reachable = false;
  std::chrono::milliseconds latency{0};
  std::string error;
};

struct HealthReport {
  std::string mountpoint;
  std::string federation_url;
  bool mounted = false;
  bool offline = false;
  std::vector<NamespaceHealth> namespaces;
  std::string cache_dir;
  uint64_t cache_capacity_bytes = 0;
  uint64_t cache_used_bytes = 0;
  uint64_t disk_total_bytes = 0;
  uint64_t disk_free_bytes = 0;
  std::string disk_error;  // "" when statvfs worked
  std::string store_error;  // "" unless block writes failed lately (CacheCatalog::StoreProblem)
  bool healthy = false;    // mounted, every namespace reachable, disk readable with free space, store fine
};

struct NodeInfo {
  std::string mountpoint;
  std::string federation_url;   // pelican://host/prefix, as shown to users
  ObjectPath federation_prefix; // the mounted namespace path
  std::string cache_dir;
  // The federation path a URL names (osdf:///ns/x -> /ns/x); an error when
  // the URL is malformed or names another federation.
  std::function<Result<std::string>(std::string_view url)> path_of_url;
};

class NodeControl {
 public:
  using NetworkStatsFn = std::function<NetworkStats()>;
  using DiskSpaceFn = std::function<Status(uint64_t* total, uint64_t* free)>;
  using MountedFn = std::function<bool()>;

  // `scheduler` and `prefetcher` may be null (no prefetch).
  // `jobs` runs the disk work of commands (Evict).
  NodeControl(NodeInfo info, BlockReader& reader, CacheCatalog& catalog, Warmer& warmer, Origin& origin,
              Executor& jobs, const OpMetrics& ops, NetworkStatsFn network, DiskSpaceFn disk, MountedFn mounted,
              std::function<bool()> offline, const FetchScheduler* scheduler = nullptr,
              Prefetcher* prefetcher = nullptr);

  // The object path (below the mounted prefix) that `user_path` names.
  // kInvalidArgument when it is outside the mount and the federation prefix.
  Result<ObjectPath> Resolve(std::string_view user_path) const;
  // The path users see for object path `p`: the federation path.
  std::string FederationPath(const ObjectPath& p) const;

  StatsSnapshot Stats() const;

  // Asks the federation about the mounted prefix and every namespace read so
  // far (at most 16), in parallel, each within `timeout`.
  void Health(std::chrono::milliseconds timeout, std::function<void(HealthReport)> done);

  // Evicts everything cached below `path` on the job executor (disk work)
  // and calls `done` there.
  void Evict(const ObjectPath& path, std::function<void(Result<EvictResult>)> done);

  // Resolves `paths` and hands them to the prefetcher as job `job`'s list;
  // returns (accepted, rejected). kInvalidArgument without a prefetcher.
  Result<std::pair<uint64_t, uint64_t>> Hint(const std::string& job, const std::vector<std::string>& paths);

  const NodeInfo& info() const { return info_; }
  CacheCatalog& catalog() { return catalog_; }
  Warmer& warmer() { return warmer_; }

 private:
  const NodeInfo info_;
  BlockReader& reader_;
  CacheCatalog& catalog_;
  Warmer& warmer_;
  Origin& origin_;
  Executor& jobs_;
  const OpMetrics& ops_;
  const NetworkStatsFn network_;
  const DiskSpaceFn disk_;
  const MountedFn mounted_;
  const std::function<bool()> offline_;
  const FetchScheduler* const scheduler_;
  Prefetcher* const prefetcher_;
  const Clock::time_point started_ = Clock::now();
};

}  // namespace perch::core
