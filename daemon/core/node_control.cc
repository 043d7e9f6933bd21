#include "daemon/core/node_control.h"

#include <memory>
#include <mutex>

namespace perch::core {

const char* OpMetrics::Name(Op op) {
  switch (op) {
    case kLookup: return "lookup";
    case kGetAttr: return "getattr";
    case kOpenDir: return "opendir";
    case kReadDir: return "readdir";
    case kOpen: return "open";
    case kRead: return "read";
    case kStatFs: return "statfs";
    case kXattr: return "xattr";
    case kCount: break;
  }
  return "unknown";
}

NodeControl::NodeControl(NodeInfo info, BlockReader& reader, CacheCatalog& catalog, Warmer& warmer,
                         Origin& origin, Executor& jobs, const OpMetrics& ops, NetworkStatsFn network, DiskSpaceFn disk,
                         MountedFn mounted, std::function<bool()> offline, const FetchScheduler* scheduler,
                         Prefetcher* prefetcher)
    : info_(std::move(info)),
      reader_(reader),
      catalog_(catalog),
      warmer_(warmer),
      origin_(origin),
      jobs_(jobs),
      ops_(ops),
      network_(std::move(network)),
      disk_(std::move(disk)),
      mounted_(std::move(mounted)),
      offline_(std::move(offline)),
      scheduler_(scheduler),
      prefetcher_(prefetcher) {}

namespace {

// `path` with its leading `prefix` (a directory, segment-wise) removed, as an
// absolute path; nullopt when `path` is not at or below `prefix`.
std::optional<std::string> StripPrefix(std::string_view path, std::string_view prefix) {
  while (prefix.size() > 1 && prefix.back() == '/') prefix.remove_suffix(1);
  if (prefix == "/") return std::string(path);
  if (!path.starts_with(prefix)) return std::nullopt;
  std::string_view rest = path.substr(prefix.size());
  if (!rest.empty() && rest.front() != '/') return std::nullopt;
  return rest.empty() ? std::string("/") : std::string(rest);
}

}  // namespace

Result<ObjectPath> NodeControl::Resolve(std::string_view user_path) const {
  if (user_path.empty()) return InvalidArgumentError("empty path");
  std::string federation_path;
  if (user_path.find("://") != std::string_view::npos) {
    // A federation URL: it must name this mount's federation.
    if (!info_.path_of_url) return InvalidArgumentError("federation URLs are not accepted here");
    auto path = info_.path_of_url(user_path);
    if (!path.ok()) return path.status();
    federation_path = *path;
  } else if (user_path.front() != '/') {
    return InvalidArgumentError(std::string(user_path) + " is not an absolute path");
  } else if (auto in_mount = StripPrefix(user_path, info_.mountpoint);
             in_mount && !info_.mountpoint.empty()) {
    auto p = ObjectPath::Parse(*in_mount);
    if (!p.ok()) return p.status();
    return *p;
  } else {
    federation_path = std::string(user_path);
  }
  auto parsed = ObjectPath::Parse(federation_path);
  if (!parsed.ok()) return parsed.status();
  auto below = StripPrefix(parsed->str(), info_.federation_prefix.str());
  if (!below) {
    return InvalidArgumentError(std::string(user_path) + " is neither inside the mount (" + info_.mountpoint +
                                ") nor below the mounted federation path (" + info_.federation_prefix.str() +
                                ")");
  }
  return ObjectPath::Parse(*below);
}

std::string NodeControl::FederationPath(const ObjectPath& p) const {
  if (info_.federation_prefix.IsRoot()) return p.str();
  if (p.IsRoot()) return info_.federation_prefix.str();
  return info_.federation_prefix.str() + p.str();
}

StatsSnapshot NodeControl::Stats() const {
  StatsSnapshot s;
  const BlockReaderStats& r = reader_.stats();
  s.totals = {r.hits.load(), r.misses.load(), r.bytes_from_cache.load(), r.bytes_from_network.load()};
  s.shared_fetches = r.shared_fetches.load();
  s.corrupt_blocks = r.corrupt_blocks.load();
  s.store_errors = r.store_errors.load();
  reader_.namespace_stats().ForEach([&](const std::string& name, const ReadCounters& c) {
    s.namespaces.emplace_back(FederationPath(*ObjectPath::Parse(name)), c.Take());
  });
  s.cached_bytes = catalog_.cached_bytes();
  s.capacity_bytes = catalog_.capacity_bytes();
  s.pinned_bytes = catalog_.pinned_bytes();
  s.cached_blocks = catalog_.blocks();
  s.evictions = catalog_.evictions();
  if (network_) s.network = network_();
  s.errors = ops_.errors().Take();
  for (int op = 0; op < OpMetrics::kCount; ++op) {
    auto o = static_cast<OpMetrics::Op>(op);
    s.fuse_ops.emplace_back(OpMetrics::Name(o), ops_.latency(o).Take());
  }
  s.origin_get = reader_.fetch_latency().Take();
  s.warm_jobs = warmer_.Jobs();
  if (prefetcher_ != nullptr) {
    const PrefetchStats& p = prefetcher_->stats();
    s.prefetch = {p.sequential_blocks.load(), p.directory_files.load(), p.hinted_files.load(), p.withdrawn.load()};
  }
  if (scheduler_ != nullptr) {
    s.scheduler = scheduler_->Stats();
    s.budget_requests = scheduler_->options().max_requests;
  }
  s.offline = offline_ && offline_();
  s.uptime_seconds =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started_).count());
  return s;
}

void NodeControl::Evict(const ObjectPath& path, std::function<void(Result<EvictResult>)> done) {
  jobs_.Post([this, path, done = std::move(done)] { done(catalog_.Evict(path)); });
}

Result<std::pair<uint64_t, uint64_t>> NodeControl::Hint(const std::string& job,
                                                       const std::vector<std::string>& paths) {
  if (prefetcher_ == nullptr) return InvalidArgumentError("prefetch is off in this perchd");
  std::vector<ObjectPath> resolved;
  resolved.reserve(paths.size());
  uint64_t rejected = 0;
  for (const std::string& p : paths) {
    auto r = Resolve(p);
    if (r.ok()) {
      resolved.push_back(*std::move(r));
    } else {
      ++rejected;
    }
  }
  uint64_t accepted = resolved.size();
  prefetcher_->Hint(job, std::move(resolved));
  return std::make_pair(accepted, rejected);
}

void NodeControl::Health(std::chrono::milliseconds timeout, std::function<void(HealthReport)> done) {
  HealthReport base;
  base.mountpoint = info_.mountpoint;
  base.federation_url = info_.federation_url;
  base.mounted = mounted_ && mounted_();
  base.offline = offline_ && offline_();
  base.cache_dir = info_.cache_dir;
  base.cache_capacity_bytes = catalog_.capacity_bytes();
  base.cache_used_bytes = catalog_.cached_bytes();
  if (disk_) {
    Status s = disk_(&base.disk_total_bytes, &base.disk_free_bytes);
    if (!s.ok()) base.disk_error = s.message();
  }
  base.store_error = catalog_.StoreProblem();

  std::vector<ObjectPath> probes = {ObjectPath()};
  reader_.namespace_stats().ForEach([&](const std::string& name, const ReadCounters&) {
    if (name != "/" && probes.size() < 16) probes.push_back(*ObjectPath::Parse(name));
  });

  struct Pending {
    std::mutex mu;
    HealthReport report;
    size_t remaining = 0;
    std::function<void(HealthReport)> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->report = std::move(base);
  pending->remaining = probes.size();
  pending->done = std::move(done);
  pending->report.namespaces.resize(probes.size());
  const Deadline deadline = DeadlineAfter(timeout);
  for (size_t i = 0; i < probes.size(); ++i) {
    pending->report.namespaces[i].path = FederationPath(probes[i]);
    auto started = Clock::now();
    origin_.Stat(probes[i], deadline, [pending, i, started](Result<FileAttr> r) {
      std::function<void(HealthReport)> finish;
      HealthReport out;
      {
        std::lock_guard<std::mutex> l(pending->mu);
        NamespaceHealth& h = pending->report.namespaces[i];
        h.latency = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
        // A namespace that answers "not found" or "forbidden" is reachable.
        h.reachable = r.ok() || r.status().code() == StatusCode::kNotFound ||
                      r.status().code() == StatusCode::kPermissionDenied;
        if (!r.ok()) h.error = r.status().ToString();
        if (--pending->remaining > 0) return;
        HealthReport& rep = pending->report;
        rep.healthy = rep.mounted && rep.disk_error.empty() && rep.disk_free_bytes > 0 && rep.store_error.empty();
        for (const NamespaceHealth& n : rep.namespaces) rep.healthy = rep.healthy && n.reachable;
        out = std::move(rep);
        finish = std::move(pending->done);
      }
      finish(std::move(out));
    });
  }
}

}  // namespace perch::core
