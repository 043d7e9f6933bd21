#include "daemon/core/node_control.h"

#include <map>
#include <memory>

#include "daemon/core/check.h"
#include "daemon/core/mutex.h"

namespace perch::core {

NodeControl::NodeControl(CacheStack& stack, std::string cache_dir, const OpMetrics& ops,
                         NetworkStatsFn network, DiskSpaceFn disk)
    : stack_(stack),
      cache_dir_(std::move(cache_dir)),
      ops_(ops),
      network_(std::move(network)),
      disk_(std::move(disk)) {}

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

const std::string& FederationOfMount(const Mount& m) {
  return m.spec().federation.empty() ? m.spec().federation_id : m.spec().federation;
}

void Add(ReadCounters::Values* to, const ReadCounters::Values& v) {
  for (const auto& [name, field] : ReadCounters::Values::Fields()) to->*field += v.*field;
}

void Add(LatencyHistogram::Snapshot* to, const LatencyHistogram::Snapshot& h) {
  if (to->counts.empty()) {
    *to = h;
    return;
  }
  for (size_t i = 0; i < to->counts.size() && i < h.counts.size(); ++i)
    to->counts[i] += h.counts[i];
  to->count += h.count;
  to->sum_seconds += h.sum_seconds;
}

// The mount whose federation path `federation_path` is (the most specific
// prefix wins); ambiguous when mounts of two federations hold it.
Result<std::pair<Mount*, ObjectPath>> ByFederationPath(const std::vector<Mount*>& mounts,
                                                       std::string_view user_path,
                                                       std::string_view federation_path,
                                                       const std::string* only_federation) {
  auto parsed = ObjectPath::Parse(federation_path);
  if (!parsed.ok()) return parsed.status();
  std::vector<Mount*> candidates;
  for (Mount* m : mounts) {
    if (only_federation == nullptr || FederationOfMount(*m) == *only_federation)
      candidates.push_back(m);
  }
  ObjectPath best_below;
  Mount* best = MostSpecificMount(candidates, *parsed, &best_below);
  if (best == nullptr) {
    std::string why = std::string(user_path) + " is neither";
    for (size_t i = 0; i < mounts.size(); ++i) {
      const MountSpec& m = mounts[i]->spec();
      why += std::string(i == 0 ? "" : "; nor") + " inside the mount (" + m.mountpoint +
             ") nor below the mounted federation path (" + m.federation_prefix.str() + " of " +
             m.federation_id + ")";
    }
    return InvalidArgumentError(why);
  }
  for (Mount* m : candidates) {
    if (parsed->HasPrefix(m->spec().federation_prefix) &&
        FederationOfMount(*m) != FederationOfMount(*best)) {
      return InvalidArgumentError(std::string(user_path) + " is ambiguous: both " +
                                  best->spec().federation_id + " and " + m->spec().federation_id +
                                  " hold it; name it by its mount path or its URL");
    }
  }
  return std::make_pair(best, best_below);
}

}  // namespace

Result<ObjectPath> NodeControl::Resolve(std::string_view user_path) const {
  if (user_path.empty()) return InvalidArgumentError("empty path");
  const std::vector<Mount*> mounts = stack_.mounts();
  if (user_path.find("://") != std::string_view::npos) {
    // A federation URL: it must name a mounted federation.
    Status first = InvalidArgumentError("federation URLs are not accepted here");
    for (Mount* m : mounts) {
      if (!m->spec().path_of_url) continue;
      auto path = m->spec().path_of_url(user_path);
      if (!path.ok()) {
        if (first.message() == "federation URLs are not accepted here") first = path.status();
        continue;
      }
      auto r = ByFederationPath(mounts, user_path, *path, &FederationOfMount(*m));
      if (!r.ok()) return r.status();
      return r->first->CatalogPath(r->second);
    }
    return first;
  }
  if (user_path.front() != '/')
    return InvalidArgumentError(std::string(user_path) + " is not an absolute path");
  // A path inside a mount (the deepest mountpoint wins: mounts may nest).
  Mount* in = nullptr;
  std::string below;
  for (Mount* m : mounts) {
    const std::string& mp = m->spec().mountpoint;
    if (mp.empty()) continue;
    auto rest = StripPrefix(user_path, mp);
    if (rest && (in == nullptr || mp.size() > in->spec().mountpoint.size())) {
      in = m;
      below = *rest;
    }
  }
  if (in != nullptr) {
    auto p = ObjectPath::Parse(below);
    if (!p.ok()) return p.status();
    return in->CatalogPath(*p);
  }
  auto r = ByFederationPath(mounts, user_path, user_path, nullptr);
  if (!r.ok()) return r.status();
  return r->first->CatalogPath(r->second);
}

std::string NodeControl::FederationPath(const ObjectPath& p) const {
  ObjectPath below;
  Mount* m = stack_.MountOfCatalogPath(p, &below);
  return m == nullptr ? p.str() : m->FederationPath(below);
}

std::string NodeControl::FederationOf(const ObjectPath& p) const {
  ObjectPath below;
  Mount* m = stack_.MountOfCatalogPath(p, &below);
  return m == nullptr ? "" : m->spec().federation_id;
}

StatsSnapshot NodeControl::Stats() const {
  StatsSnapshot s;
  const DigestKeeperStats& d = stack_.digests().stats();
  s.digest_asks = d.asks.load();
  s.digests_handed_out = d.verified.load() + d.vouched.load();
  s.digest_cache_mismatches = d.mismatches.load();
  for (Mount* m : stack_.mounts()) {
    const BlockReaderStats& r = m->reader().stats();
    Add(&s.totals,
        {r.hits.load(), r.misses.load(), r.bytes_from_cache.load(), r.bytes_from_network.load()});
    s.shared_fetches += r.shared_fetches.load();
    s.corrupt_blocks += r.corrupt_blocks.load();
    s.store_errors += r.store_errors.load();
    s.whole_files += r.whole_files.load();
    s.uncacheable_blocks += r.uncacheable_blocks.load();
    s.version_checks += m->guard().confirmations();
    s.versions_replaced += m->guard().replacements();
    s.revalidations += m->names().revalidations();
    s.revalidated_changes += m->names().revalidated_changes();
    m->reader().namespace_stats().ForEach([&](const std::string& name, const ReadCounters& c) {
      s.namespaces.push_back({m->spec().federation_id,
                              m->FederationPath(PERCH_CHECKED(ObjectPath::Parse(name))), c.Take()});
    });
    Add(&s.origin_get, m->reader().fetch_latency().Take());
    for (WarmProgress& w : m->warmer().Jobs()) s.warm_jobs.push_back(std::move(w));
    if (const Prefetcher* p = m->prefetcher()) {
      const PrefetchStats& ps = p->stats();
      s.prefetch.sequential_blocks += ps.sequential_blocks.load();
      s.prefetch.directory_files += ps.directory_files.load();
      s.prefetch.hinted_files += ps.hinted_files.load();
      s.prefetch.directories_listed_ahead += ps.directories_listed_ahead.load();
      s.prefetch.withdrawn += ps.withdrawn.load();
    }
    s.offline = s.offline || m->offline();
  }
  const ScrubCounters& scrub = stack_.scrubber().counters();
  s.scrub.bytes = scrub.bytes.load();
  s.scrub.corrupt_blocks = scrub.corrupt_blocks.load();
  s.scrub.digest_mismatches = scrub.digest_mismatches.load();
  s.scrub.digests_verified = scrub.digests_verified.load();
  s.scrub.passes = scrub.passes.load();
  s.corrupt_blocks += s.scrub.corrupt_blocks;  // every block that failed a check
  const CacheCatalog& catalog = stack_.catalog();
  s.cached_bytes = catalog.cached_bytes();
  s.capacity_bytes = catalog.capacity_bytes();
  s.pinned_bytes = catalog.pinned_bytes();
  s.cached_blocks = catalog.blocks();
  s.evictions = catalog.evictions();
  s.evicted_bytes = catalog.evicted_bytes();
  if (network_) s.network = network_();
  // Objects of one block are checked as fetched (the federation client's
  // counts), larger ones once held whole (DigestKeeper's).
  s.network.digests_verified += d.verified.load();
  s.network.digests_unverified += d.unverified.load();
  if (network_) s.digest_asks = s.network.digest_asks;
  s.errors = ops_.errors().Take();
  ops_.clients().ForEach([&s](const std::string& name, const ClientCounters& c) {
    s.http_clients.push_back(ClientStats{name, c.requests.load(), c.bytes.load(), c.errors.load()});
  });
  s.http_endpoint.refused_per_user = ops_.endpoint().refused_per_user.load();
  s.http_endpoint.request_timeouts = ops_.endpoint().request_timeouts.load();
  for (int op = 0; op < OpMetrics::kCount; ++op) {
    auto o = static_cast<OpMetrics::Op>(op);
    s.fuse_ops.emplace_back(OpMetrics::Name(o), ops_.latency(o).Take());
  }
  s.scheduler = stack_.scheduler().Stats();
  s.budget_requests = stack_.scheduler().options().max_requests;
  s.uptime_seconds = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started_).count());
  return s;
}

void NodeControl::Evict(const ObjectPath& path, std::function<void(Result<EvictResult>)> done) {
  stack_.jobs().Post([this, path, done = std::move(done)] {
    Result<EvictResult> r = stack_.catalog().Evict(path);
    if (r.ok() && r->objects == 0 && r->pinned_objects == 0 && r->busy_blocks == 0) {
      // Nothing there: a path that names nothing (a URL taken back wrong, a
      // typo) is said so, not answered "0 objects" as if it were done.
      ObjectPath below;
      Mount* m = stack_.MountOfCatalogPath(path, &below);
      if (m != nullptr && !below.IsRoot()) {
        Result<FileAttr> attr = m->fs().GetAttr(below);
        if (!attr.ok() && attr.status().code() == StatusCode::kNotFound) {
          done(NotFoundError(m->FederationPath(below) +
                             ": no such file or directory in the federation; nothing evicted"));
          return;
        }
      }
    }
    done(std::move(r));
  });
}

Result<std::shared_ptr<WarmJob>> NodeControl::Warm(const std::vector<ObjectPath>& paths,
                                                   bool recursive, Warmer::UpdateFn on_update) {
  Mount* mount = nullptr;
  std::vector<ObjectPath> below;
  for (const ObjectPath& p : paths) {
    ObjectPath b;
    Mount* m = stack_.MountOfCatalogPath(p, &b);
    if (m == nullptr) return InvalidArgumentError(p.str() + " is of no mount");
    if (mount != nullptr && m != mount) {
      return InvalidArgumentError("the paths of one warm must lie under one mount (" +
                                  mount->spec().federation_id + ", " + m->spec().federation_id +
                                  ")");
    }
    mount = m;
    below.push_back(std::move(b));
  }
  if (mount == nullptr) return InvalidArgumentError("no paths to warm");
  return mount->warmer().Start(std::move(below), recursive, std::move(on_update));
}

std::shared_ptr<ScrubJob> NodeControl::Verify(const ObjectPath& path,
                                              Scrubber::UpdateFn on_update) {
  const std::string shown = path.IsRoot() ? "/" : FederationPath(path);
  return stack_.scrubber().Verify(path, shown, std::move(on_update));
}

Result<std::pair<uint64_t, uint64_t>> NodeControl::Hint(const std::string& job,
                                                        const std::vector<std::string>& paths) {
  if (!stack_.options().prefetch) return InvalidArgumentError("prefetch is off in this perchd");
  std::map<Mount*, std::vector<ObjectPath>> by_mount;
  for (Mount* m : stack_.mounts()) by_mount[m];  // a mount with no paths forgets the job's list
  uint64_t accepted = 0, rejected = 0;
  for (const std::string& p : paths) {
    auto r = Resolve(p);
    ObjectPath below;
    Mount* m = r.ok() ? stack_.MountOfCatalogPath(*r, &below) : nullptr;
    if (m == nullptr) {
      ++rejected;
      continue;
    }
    by_mount[m].push_back(std::move(below));
    ++accepted;
  }
  for (auto& [m, list] : by_mount) {
    if (m->prefetcher() != nullptr) m->prefetcher()->Hint(job, std::move(list));
  }
  return std::make_pair(accepted, rejected);
}

void NodeControl::NoteListenerProblem(const std::string& why) {
  MutexLock l(mu_);
  if (!listener_problem_.empty()) listener_problem_ += "; ";
  listener_problem_ += why;
}

void NodeControl::Health(std::chrono::milliseconds timeout,
                         std::function<void(HealthReport)> done) {
  HealthReport base;
  base.cache_dir = cache_dir_;
  const CacheCatalog& catalog = stack_.catalog();
  base.cache_capacity_bytes = catalog.capacity_bytes();
  base.cache_used_bytes = catalog.cached_bytes();
  if (disk_) {
    Status s = disk_(&base.disk_total_bytes, &base.disk_free_bytes);
    if (!s.ok()) base.disk_error = s.message();
  }
  base.store_error = catalog.StoreProblem();
  {
    MutexLock l(mu_);
    base.listener_error = listener_problem_;
  }

  // Probes: each mount's root and the namespaces read so far (16 per mount).
  struct Probe {
    Mount* mount;
    size_t mount_index;
    ObjectPath path;
  };
  std::vector<Probe> probes;
  const std::vector<Mount*> mounts = stack_.mounts();
  for (size_t i = 0; i < mounts.size(); ++i) {
    Mount* m = mounts[i];
    base.mounts.push_back(
        {m->spec().mountpoint, m->spec().federation_id, m->mounted(), m->offline(), false});
    size_t before = probes.size();
    probes.push_back({m, i, ObjectPath()});
    m->reader().namespace_stats().ForEach([&](const std::string& name, const ReadCounters&) {
      if (name != "/" && probes.size() - before < 16)
        probes.push_back({m, i, PERCH_CHECKED(ObjectPath::Parse(name))});
    });
  }

  struct Pending {
    Mutex mu;
    HealthReport report;
    std::vector<size_t> mount_of;  // of each namespace
    std::vector<Mount*> mounts;    // of each MountHealth
    size_t remaining = 0;
    std::function<void(HealthReport)> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->report = std::move(base);
  pending->mounts = mounts;
  pending->remaining = probes.size();
  pending->done = std::move(done);
  pending->report.namespaces.resize(probes.size());
  for (size_t i = 0; i < probes.size(); ++i) {
    pending->report.namespaces[i].federation = probes[i].mount->spec().federation_id;
    pending->report.namespaces[i].path = probes[i].mount->FederationPath(probes[i].path);
    pending->mount_of.push_back(probes[i].mount_index);
  }
  if (probes.empty()) {
    pending->report.healthy = false;
    pending->done(std::move(pending->report));
    return;
  }
  const Deadline deadline = DeadlineAfter(timeout);
  for (size_t i = 0; i < probes.size(); ++i) {
    auto started = Clock::now();
    Mount* mount = probes[i].mount;
    mount->spec().origin->Stat(
        probes[i].path, deadline, [pending, i, started, mount](Result<FileAttr> r) {
          std::function<void(HealthReport)> finish;
          HealthReport out;
          {
            MutexLock l(pending->mu);
            NamespaceHealth& h = pending->report.namespaces[i];
            h.latency =
                std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
            // A namespace that answers "not found" or "forbidden" is reachable.
            h.reachable = r.ok() || r.status().code() == StatusCode::kNotFound ||
                          r.status().code() == StatusCode::kPermissionDenied;
            if (h.reachable) mount->names().NoteOnline();  // it answers: stats say so too
            if (!r.ok()) h.error = r.status().ToString();
            if (--pending->remaining > 0) return;
            HealthReport& rep = pending->report;
            for (size_t k = 0; k < rep.mounts.size(); ++k) {
              // As it is now that the probes answered: never "healthy" beside OFFLINE.
              MountHealth& m = rep.mounts[k];
              m.offline = pending->mounts[k]->offline();
              m.healthy = m.mounted && !m.offline;
            }
            for (size_t n = 0; n < rep.namespaces.size(); ++n) {
              MountHealth& m = rep.mounts[pending->mount_of[n]];
              m.healthy = m.healthy && rep.namespaces[n].reachable;
            }
            rep.healthy = rep.disk_error.empty() && rep.disk_free_bytes > 0 &&
                          rep.store_error.empty() && rep.listener_error.empty();
            for (const MountHealth& m : rep.mounts) rep.healthy = rep.healthy && m.healthy;
            out = std::move(rep);
            finish = std::move(pending->done);
          }
          finish(std::move(out));
        });
  }
}

}  // namespace perch::core
