#include "perchd/stack.h"

#include <grp.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "daemon/http/digest.h"
#include "daemon/uri/percent.h"
#include "fuse/mountpoint.h"
#include "perch/version.h"

#if PERCH_TCMALLOC
#include <gperftools/malloc_extension.h>
#endif

namespace perch {

core::Status DiskSpace(const std::string& dir, uint64_t* total, uint64_t* free) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0)
    return core::InternalError(std::string("statvfs: ") + std::strerror(errno));
  *total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  *free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  return core::Status::Ok();
}

void ReleaseFreeMemory() {
#if PERCH_TCMALLOC
  MallocExtension::instance()->ReleaseFreeMemory();
#else
  malloc_trim(0);
#endif
}

core::StackOptions StackOptionsOf(const DaemonConfig& cfg) {
  core::StackOptions o;
  o.digest_hasher = http::NewDigestHasher;
  o.catalog = core::CatalogOptions{cfg.cache_size,
                                   cfg.high_watermark,
                                   cfg.low_watermark,
                                   1024,
                                   [dir = cfg.cache_dir](uint64_t* total, uint64_t* free) {
                                     return DiskSpace(dir, total, free);
                                   },
                                   ReleaseFreeMemory,
                                   nullptr};  // future_uses: the stack's own (hints)
  o.scheduler = core::SchedulerOptions{cfg.max_requests_in_flight, cfg.max_bytes_in_flight, 0.75};
  o.reader.block_size = cfg.block_size;
  o.prefetch = cfg.prefetch;
  o.prefetch_options.max_window_bytes = cfg.readahead;
  o.prefetch_options.dir_max_entries = cfg.prefetch_dir_max_entries;
  o.prefetch_options.hint_window = cfg.hint_window;
  o.version_check_interval = cfg.version_check_interval;
  o.verify_complete_objects = cfg.verify_digests;
  o.scrub.rate_bytes_per_second = cfg.scrub_rate;
  o.scrub.start_delay = cfg.scrub_start_delay;
  return o;
}

std::vector<std::unique_ptr<http::CurlLoop>> NetLoopsOf(const DaemonConfig& cfg) {
  const size_t net_threads = NetThreadsOf(cfg, std::thread::hardware_concurrency());
  http::CurlLoop::Options loop_opts;
  loop_opts.max_in_flight = (cfg.max_requests_in_flight + net_threads - 1) / net_threads;
  loop_opts.max_host_connections =
      (loop_opts.max_host_connections + static_cast<long>(net_threads) - 1) /
      static_cast<long>(net_threads);
  loop_opts.ca_file = cfg.ca_file;
  loop_opts.user_agent = std::string("perch/") + kVersion;
  std::vector<std::unique_ptr<http::CurlLoop>> net;
  for (size_t i = 0; i < net_threads; ++i)
    net.push_back(std::make_unique<http::CurlLoop>(loop_opts));
  spdlog::info("network: {} loop{}", net_threads, net_threads == 1 ? "" : "s");
  return net;
}

core::Result<std::vector<std::unique_ptr<Federation>>> PrepareMounts(
    const DaemonConfig& cfg, const std::vector<handoff::MountHandoff>& inherited) {
  std::vector<std::unique_ptr<Federation>> out;
  for (const handoff::MountHandoff& h : inherited) {
    bool found = false;
    for (const MountConfig& m : MountsOf(cfg)) found = found || m.mountpoint == h.mountpoint;
    if (!found) {
      return core::InvalidArgumentError("the running perchd serves " + h.mountpoint +
                                        ", which this configuration does not mount");
    }
  }
  for (const MountConfig& m : MountsOf(cfg)) {
    auto url = http::ParseFederationUrl(m.federation_url);
    if (!url.ok()) return url.status();
    bool adopted = false;
    for (const handoff::MountHandoff& h : inherited)
      adopted = adopted || m.mountpoint == h.mountpoint;
    if (core::Status s =
            adopted ? core::Status::Ok()
                    : fuse::PrepareMountpoint(m.mountpoint, m.allow_nonempty_mountpoint ||
                                                                cfg.allow_nonempty_mountpoint);
        !s.ok()) {
      return s;
    }
    auto f = std::make_unique<Federation>();
    f->cfg = m;
    f->url = *std::move(url);
    out.push_back(std::move(f));
  }
  return out;
}

core::Status AddMount(const DaemonConfig& cfg, const std::vector<http::CurlLoop*>& loops,
                      core::CacheStack& stack, Federation& f) {
  http::FederationClientOptions client_opts;
  client_opts.token_file = f.cfg.token_file.empty() ? cfg.token_file : f.cfg.token_file;
  client_opts.namespace_token_files = f.cfg.namespace_tokens;
  client_opts.namespace_token_files.insert(cfg.namespace_tokens.begin(),
                                           cfg.namespace_tokens.end());
  client_opts.verify_digests = cfg.verify_digests;
  client_opts.digest_requests_per_origin = cfg.digest_requests_per_origin;
  client_opts.digest_requests_per_server = cfg.digest_requests_per_server;
  f.client = std::make_unique<http::FederationClient>(loops, f.url, client_opts);
  core::MountSpec spec;
  spec.federation_id = f.url.ToString();
  spec.federation = f.url.discovery_url;
  spec.federation_prefix = f.url.path;
  spec.origin = f.client.get();
  std::error_code ec;
  spec.mountpoint = std::filesystem::canonical(f.cfg.mountpoint, ec).string();
  if (ec) spec.mountpoint = f.cfg.mountpoint;
  spec.names.file_ttl = cfg.file_ttl;
  spec.names.dir_ttl = cfg.dir_ttl;
  spec.names.negative_ttl = cfg.negative_ttl;
  spec.op_timeout = cfg.op_timeout;
  spec.path_of_url = [fed = f.url](std::string_view text) -> core::Result<std::string> {
    auto other = http::ParseFederationUrl(text);
    if (!other.ok()) return other.status();
    if (other->discovery_url != fed.discovery_url) {
      return core::InvalidArgumentError(std::string(text) + " names another federation than " +
                                        fed.ToString());
    }
    return other->path.str();
  };
  spec.encode_path = [](const core::ObjectPath& p) { return uri::PercentEncodePath(p); };
  // A cache from before mount tags had one mount: its namespace entries are this one's.
  spec.adopt_untagged_entries = MountsOf(cfg).size() == 1;
  spec.last_server = [client = f.client.get()](const core::ObjectPath& p) {
    return client->LastServer(p);
  };
  auto mount = stack.AddMount(std::move(spec));
  if (!mount.ok()) return mount.status();
  f.mount = *mount;
  // Is the federation there? With a warm cache perchd serves offline.
  return f.mount->CheckRoot(std::min(cfg.op_timeout, std::chrono::milliseconds(15000)));
}

core::Result<fuse::FuseOptions> FuseOptionsOf(const DaemonConfig& cfg, core::CacheStack& stack,
                                              core::OpMetrics& ops) {
  fuse::FuseOptions o;
  o.max_threads = cfg.fuse_threads;
  o.metrics = &ops;
  o.no_open = cfg.fuse_no_open;
  o.passthrough = cfg.fuse_passthrough;
  o.read_ahead = cfg.fuse_read_ahead;
  if (!cfg.protected_group.empty()) {
    struct group* g = ::getgrnam(cfg.protected_group.c_str());
    if (g == nullptr) {
      return core::InvalidArgumentError("protected_group '" + cfg.protected_group +
                                        "' is not a group on this node");
    }
    o.restricted_gid = static_cast<int>(g->gr_gid);
  }
  o.statfs = [&stack](struct statvfs* st) {
    uint64_t blocks = 0, free = 0;
    stack.StatFs(st->f_frsize, &blocks, &free);
    st->f_blocks = blocks;
    st->f_bfree = st->f_bavail = free;
  };
  return o;
}

void AddFuseServer(const fuse::FuseOptions& shared, Federation& f) {
  fuse::FuseOptions o = shared;
  o.fsname = "perch:" + f.url.ToString();
  o.xattrs = [m = f.mount](const core::ObjectPath& p, const core::FileAttr& a) {
    return m->Xattrs(p, a);
  };
  o.xattr = [m = f.mount](const core::ObjectPath& p, const core::FileAttr& a,
                          std::string_view name) { return m->Xattr(p, a, name); };
  f.server = std::make_unique<fuse::FuseServer>(f.mount->fs(), o);
  f.mount->set_mounted_probe([s = f.server.get()] { return s->mounted(); });
}

core::NetworkStats NetworkOf(const std::vector<std::unique_ptr<Federation>>& feds,
                             const std::vector<http::CurlLoop*>& loops) {
  core::NetworkStats n;
  std::map<std::string, http::ServerTally::Counts> by_server;  // a server may serve several
  for (const http::CurlLoop* loop : loops) {
    n.inflight_requests += loop->InFlight();
    n.queued_requests += loop->Queued();
  }
  for (const auto& f : feds) {
    const http::FederationCounters::Values c = f->client->counters();
    n.range_gets += c.range_gets;
    n.failovers += c.failovers;
    n.resumes += c.resumes;
    n.digests_verified += c.digests_verified;
    n.digest_mismatches += c.digest_mismatches;
    n.digests_unverified += c.digests_unverified;
    n.digest_asks += c.digest_asks;
    n.origin_fallbacks += c.origin_fallbacks;
    for (const auto& [server, counts] : f->client->servers()) by_server[server] += counts;
  }
  for (const auto& [server, c] : by_server)
    n.servers.push_back(core::ServerStats{server, c.digest_mismatches, c.failures});
  return n;
}

}  // namespace perch
