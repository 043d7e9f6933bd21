// perchd: mounts a federation namespace read-only through FUSE over a
// persistent block cache. This file only wires components together:
// configuration, the cache stack, the mount, signals and orderly shutdown.
#include <fcntl.h>
#include <grp.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "client/cli_exit.h"
#include "daemon/config.h"
#include "daemon/control/control_server.h"
#include "daemon/core/block_reader.h"
#include "daemon/core/cache_catalog.h"
#include "daemon/core/filesystem.h"
#include "daemon/core/namespace_cache.h"
#include "daemon/core/node_control.h"
#include "daemon/core/prefetcher.h"
#include "daemon/core/warmer.h"
#include "daemon/http/federation_client.h"
#include "daemon/store/cache_dir_lock.h"
#include "daemon/store/file_block_store.h"
#include "daemon/store/rocksdb_index.h"
#include "daemon/thread_pool_executor.h"
#include "fuse/fuse_server.h"
#include "fuse/mountpoint.h"
#include "proto/control_address.h"

namespace perch {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;

// Runs the daemon proper; returns the exit status. `ready` is called once the
// mount serves (it detaches from the terminal when not in the foreground).
int Serve(const DaemonConfig& cfg, const std::function<void()>& ready) {
  auto url = http::ParseFederationUrl(cfg.federation_url);
  if (!url.ok()) {
    spdlog::error("{}", url.status().message());
    return kExitUsage;
  }
  if (core::Status s = fuse::PrepareMountpoint(cfg.mountpoint, cfg.allow_nonempty_mountpoint); !s.ok()) {
    spdlog::error("{}", s.message());
    return s.code() == core::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
  }
  auto lock = store::CacheDirLock::Acquire(cfg.cache_dir);
  if (!lock.ok()) {
    spdlog::error("{}", lock.status().message());
    return kExitFailure;
  }
  auto index = store::RocksDbIndex::Open((std::filesystem::path(cfg.cache_dir) / "index").string());
  if (!index.ok()) {
    spdlog::error("cannot open the cache index: {}", index.status().message());
    return kExitFailure;
  }
  store::FileBlockStore blocks(cfg.cache_dir);

  http::CurlLoop::Options loop_opts;
  loop_opts.max_in_flight = cfg.max_requests_in_flight;
  loop_opts.ca_file = cfg.ca_file;
  loop_opts.user_agent = "perch/0.1";
  http::CurlLoop loop(loop_opts);
  http::FederationClientOptions client_opts;
  client_opts.token_file = cfg.token_file;
  client_opts.namespace_token_files = cfg.namespace_tokens;
  http::FederationClient client(loop, *url, client_opts);

  ThreadPoolExecutor disk(2);
  auto disk_space = [dir = cfg.cache_dir](uint64_t* total, uint64_t* free) {
    struct statvfs st {};
    if (::statvfs(dir.c_str(), &st) != 0) return core::InternalError(std::string("statvfs: ") + std::strerror(errno));
    *total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
    *free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
    return core::Status::Ok();
  };
  std::atomic<core::BlockReader*> reader_ptr{nullptr};  // set below; the catalog asks it what is in use
  core::CacheCatalog catalog(
      **index, blocks, disk,
      core::CatalogOptions{cfg.cache_size, cfg.high_watermark, cfg.low_watermark, 1024, disk_space},
      [&reader_ptr](const core::BlockKey& k) {
        core::BlockReader* r = reader_ptr.load();
        return r != nullptr && r->InUse(k);
      });
  core::Status loaded = catalog.Load();
  if (loaded.code() == core::StatusCode::kCorrupt) {
    // Corruption found past Open: a new index; Reconcile re-adopts the blocks.
    if (core::Status s = (*index)->Reset(loaded); !s.ok()) {
      spdlog::error("{}", s.message());
      return kExitFailure;
    }
    loaded = catalog.Load();
  }
  if (!loaded.ok()) {
    spdlog::error("cannot read the cache index: {}", loaded.ToString());
    return kExitFailure;
  }
  catalog.Reconcile();  // background: orphans, leftovers, records without files
  core::NamespaceCache names(client, **index,
                             core::NamespaceOptions{cfg.file_ttl, cfg.dir_ttl, cfg.negative_ttl});
  core::FetchScheduler scheduler(core::SchedulerOptions{cfg.max_requests_in_flight, cfg.max_bytes_in_flight, 0.75});
  core::BlockReaderOptions reader_opts;
  reader_opts.block_size = cfg.block_size;
  core::BlockReader reader(client, blocks, disk, reader_opts, &catalog, &scheduler);
  reader_ptr = &reader;
  // Background work that may block: warm walks, prefetch listings and hint lookups.
  ThreadPoolExecutor jobs(4);
  core::PrefetchOptions popts;
  popts.sequential = popts.directories = cfg.prefetch;
  // Nothing is fetched ahead so far that it would push out what is being read
  // (of the quota as the filesystem caps it: a small disk prefetches less).
  const uint64_t quota = catalog.capacity_bytes();
  popts.max_window_bytes = std::min(cfg.readahead, quota / 8);
  popts.dir_max_entries = cfg.prefetch_dir_max_entries;
  popts.dir_max_bytes = quota / 8;  // never let one directory's prefetch flush the cache
  popts.hint_window = cfg.hint_window;
  core::Prefetcher prefetcher(names, reader, jobs, popts, [fed = url->ToString()](const core::ObjectPath& p, const core::FileAttr& a) {
    return core::ObjectIdFor(fed, p, a);
  });
  core::Prefetcher* prefetch = cfg.prefetch ? &prefetcher : nullptr;
  core::FileSystem fs(names, reader, core::FileSystemOptions{cfg.op_timeout, url->ToString()}, prefetch);

  // Is the federation there? With a warm cache perchd serves offline; without
  // one there is nothing to serve.
  auto root = names.GetAttr(core::ObjectPath(), core::DeadlineAfter(std::min(cfg.op_timeout, std::chrono::milliseconds(15000))));
  if (!root.ok()) {
    bool offline = root.status().code() == core::StatusCode::kUnavailable ||
                   root.status().code() == core::StatusCode::kDeadlineExceeded;
    if (offline && names.HasPersistedEntries()) {
      spdlog::warn("federation {} unreachable ({}); serving the cached namespace and retrying in the background",
                   url->ToString(), root.status().message());
    } else {
      spdlog::error("cannot mount {}: {}", url->ToString(), root.status().message());
      return kExitFailure;
    }
  } else if (!root->is_dir) {
    spdlog::error("{} is a file, not a directory; mount its parent", url->ToString());
    return kExitUsage;
  }

  core::OpMetrics op_metrics;
  fuse::FuseOptions fopts;
  fopts.max_threads = cfg.fuse_threads;
  fopts.fsname = "perch:" + url->ToString();
  fopts.metrics = &op_metrics;
  fopts.no_open = cfg.fuse_no_open;
  if (!cfg.protected_group.empty()) {
    struct group* g = ::getgrnam(cfg.protected_group.c_str());
    if (g == nullptr) {
      spdlog::error("protected_group '{}' is not a group on this node", cfg.protected_group);
      return kExitUsage;
    }
    fopts.restricted_gid = static_cast<int>(g->gr_gid);
  }
  fopts.statfs = [&catalog](struct statvfs* st) {
    st->f_blocks = catalog.capacity_bytes() / st->f_frsize;
    uint64_t used = std::min(catalog.cached_bytes(), catalog.capacity_bytes());
    st->f_bfree = st->f_bavail = (catalog.capacity_bytes() - used) / st->f_frsize;
  };
  fopts.xattrs = [&fs, &url, &catalog, &client](const core::ObjectPath& p, const core::FileAttr& a) {
    std::map<std::string, std::string> x;
    x["user.perch.federation"] = url->ToString();
    if (!a.is_dir) {
      std::string id = fs.ObjectId(p, a);
      x["user.perch.cache_id"] = id;
      x["user.perch.cached_bytes"] = std::to_string(catalog.CachedBytes(id));
      x["user.perch.url"] = url->ToString() + (url->path.IsRoot() ? p.str().substr(1) : p.str());
      if (std::string server = client.LastServer(p); !server.empty()) {
        x["user.perch.server"] = server;
      }
    }
    return x;
  };
  fuse::FuseServer server(fs, fopts);

  // The control plane: perchctl over gRPC, Prometheus, warm jobs.
  core::Warmer warmer(fs, reader, catalog, jobs, core::WarmerOptions{});
  std::error_code canon_ec;
  core::NodeInfo info;
  info.mountpoint = std::filesystem::canonical(cfg.mountpoint, canon_ec).string();
  if (canon_ec) info.mountpoint = cfg.mountpoint;
  info.federation_url = url->ToString();
  info.federation_prefix = url->path;
  info.cache_dir = cfg.cache_dir;
  info.path_of_url = [fed = *url](std::string_view text) -> core::Result<std::string> {
    auto other = http::ParseFederationUrl(text);
    if (!other.ok()) return other.status();
    if (other->discovery_url != fed.discovery_url) {
      return core::InvalidArgumentError(std::string(text) + " names another federation than " + fed.ToString());
    }
    return other->path.str();
  };
  core::NodeControl node(
      std::move(info), reader, catalog, warmer, client, jobs, op_metrics,
      [&client, &loop] {
        const http::FederationCounters& c = client.counters();
        core::NetworkStats n;
        n.inflight_requests = loop.InFlight();
        n.queued_requests = loop.Queued();
        n.range_gets = c.range_gets.load();
        n.failovers = c.failovers.load();
        n.resumes = c.resumes.load();
        return n;
      },
      disk_space,
      [&server] { return server.mounted(); }, [&fs] { return fs.offline(); }, &scheduler, prefetch);
  control::MetricsServer metrics(node);
  if (!cfg.metrics_address.empty()) {
    if (core::Status s = metrics.Start(cfg.metrics_address, cfg.metrics_allow_remote); !s.ok()) {
      spdlog::error("{}", s.message());
      return kExitUsage;
    }
  }
  control::ControlServer control(node);
  control::ControlOptions copts;
  copts.address = cfg.control_address.empty() ? "unix:" + DefaultControlSocket() : cfg.control_address;
  copts.socket_group = cfg.control_group;
  copts.metrics_address = metrics.address();
  if (core::Status s = control.Start(copts); !s.ok()) {
    spdlog::error("{}", s.message());
    return kExitFailure;
  }

  if (core::Status s = server.Mount(cfg.mountpoint); !s.ok()) {
    spdlog::error("{}", s.message());
    return kExitUsage;
  }
  spdlog::info("mounted {} at {} (cache {} , {} MiB, blocks of {} KiB)", url->ToString(), cfg.mountpoint,
               cfg.cache_dir, cfg.cache_size >> 20, cfg.block_size >> 10);

  // Access times reach the index in batches every few seconds.
  std::function<void()> flush_loop;
  std::atomic<bool> stopping{false};
  flush_loop = [&] {
    if (stopping) return;
    catalog.Flush().IgnoreError();
    catalog.UpdateCapacity();  // the disk may be filling with other things
    disk.PostAfter(std::chrono::seconds(5), flush_loop);
  };
  disk.PostAfter(std::chrono::seconds(5), flush_loop);

  ready();
  // Under systemd (Type=notify) the unit becomes active only now, with the mount serving.
  sd_notifyf(0, "READY=1\nSTATUS=serving %s at %s", url->ToString().c_str(), cfg.mountpoint.c_str());
  core::Status run = server.Run();
  sd_notify(0, "STOPPING=1");
  control.Shutdown();  // ends warm streams (their warms are cancelled)
  metrics.Stop();
  warmer.Shutdown(std::chrono::seconds(2));
  prefetcher.Shutdown();
  spdlog::info("unmounting {}", cfg.mountpoint);
  server.Unmount();
  loop.Shutdown();  // in-flight fetches end (cancelled) while the cache objects still exist
  jobs.Join();
  stopping = true;
  catalog.Flush().IgnoreError();
  disk.Join();
  if (!run.ok()) {
    spdlog::error("{}", run.message());
    return kExitFailure;
  }
  return 0;
}

}  // namespace
}  // namespace perch

int main(int argc, char** argv) {
  // Everything perchd creates (block files, the index, sockets' directories)
  // is private to it: cached paths of protected namespaces must not leak.
  ::umask(077);
  using perch::ConfigError;
  perch::DaemonConfig cfg;
  CLI::App app{"perchd: mount a Pelican/OSDF federation namespace read-only, with a persistent node cache.\n"
               "Example: perchd --cache-dir /var/cache/perch --cache-size 50G osdf:///ospool/uc-shared/public /osdf"};
  std::string config_file, cache_size, block_size, op_timeout;
  app.add_option("--config", config_file, "TOML configuration file (flags override it)")->check(CLI::ExistingFile);
  app.add_option("--cache-dir", cfg.cache_dir, "cache directory (block files and index)");
  app.add_option("--cache-size", cache_size, "cache quota, e.g. 50G (default 10G)");
  app.add_option("--block-size", block_size, "block size for large objects, e.g. 4M (default 4M)");
  app.add_option("--log-level", cfg.log_level, "trace, debug, info, warn, error");
  app.add_option("--ca-file", cfg.ca_file, "extra CA bundle for the federation's https servers");
  app.add_option("--token-file", cfg.token_file, "bearer token file for protected namespaces");
  app.add_option("--protected-group", cfg.protected_group,
                 "group that may read namespaces requiring a token (default: root only)");
  app.add_option("--op-timeout", op_timeout, "longest any filesystem request may wait, e.g. 30s");
  app.add_flag("-f,--foreground", cfg.foreground, "stay in the foreground (systemd, debugging)");
  std::string control_address, metrics_address;
  app.add_option("--control", control_address,
                 "control API address: unix:PATH or tcp:127.0.0.1:PORT (default unix:" + perch::DefaultControlSocket() + ")");
  bool no_prefetch = false;
  app.add_flag("--no-prefetch", no_prefetch, "no read-ahead, directory prefetch or hints (benchmarks)");
  std::string control_group;
  app.add_option("--control-group", control_group, "group owning the control socket: its members may use perchctl");
  app.add_option("--metrics", metrics_address, "serve Prometheus metrics at http://IP:PORT/metrics (loopback)");
  bool metrics_allow_remote = false, allow_nonempty_mountpoint = false;
  app.add_flag("--metrics-allow-remote", metrics_allow_remote,
               "allow --metrics on a non-loopback address (the endpoint has no authentication)");
  app.add_flag("--allow-nonempty-mountpoint", allow_nonempty_mountpoint,
               "mount over a directory that has entries (they are hidden while mounted)");
  std::string url, mountpoint;
  app.add_option("FEDERATION_URL", url, "pelican://host/path, osdf:///path or http(s)://host:port/path");
  app.add_option("MOUNTPOINT", mountpoint, "an existing empty directory");
  if (auto rc = perch::cli::Parse(app, argc, argv)) return *rc;
  try {
    if (!config_file.empty()) perch::ApplyConfigFile(config_file, &cfg);
    if (!url.empty()) cfg.federation_url = url;
    if (!mountpoint.empty()) cfg.mountpoint = mountpoint;
    if (!cache_size.empty()) cfg.cache_size = perch::ParseSize(cache_size, "--cache-size");
    if (!block_size.empty()) cfg.block_size = perch::ParseSize(block_size, "--block-size");
    if (!control_address.empty()) cfg.control_address = control_address;
    if (no_prefetch) cfg.prefetch = false;
    if (!metrics_address.empty()) cfg.metrics_address = metrics_address;
    if (!control_group.empty()) cfg.control_group = control_group;
    if (metrics_allow_remote) cfg.metrics_allow_remote = true;
    if (allow_nonempty_mountpoint) cfg.allow_nonempty_mountpoint = true;
    if (!op_timeout.empty()) cfg.op_timeout = perch::ParseDuration(op_timeout, "--op-timeout");
    if (cfg.federation_url.empty() || cfg.mountpoint.empty()) {
      throw ConfigError("FEDERATION_URL and MOUNTPOINT are required (see --help)");
    }
    perch::Validate(cfg);
  } catch (const ConfigError& e) {
    std::cerr << "perchd: " << e.what() << "\n";
    return 2;
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("perchd"));
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  if (cfg.foreground) {
    return perch::Serve(cfg, [] {});
  }
  // Background: fork before any thread exists; the parent waits until the
  // child has mounted (or failed) so that the exit status tells the truth.
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    std::perror("perchd: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("perchd: fork");
    return 1;
  }
  if (pid > 0) {
    close(pipefd[1]);
    char status = 1;
    ssize_t n = read(pipefd[0], &status, 1);
    return n == 1 ? status : 1;
  }
  close(pipefd[0]);
  setsid();
  int rc = perch::Serve(cfg, [&] {
    char ok = 0;
    if (write(pipefd[1], &ok, 1) != 1) {
      // The parent is gone; nothing to tell.
    }
    close(pipefd[1]);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
      if (devnull > 2) close(devnull);
    }
    if (chdir("/") != 0) {
      // Not fatal: we never use relative paths after start.
    }
  });
  char code = static_cast<char>(rc);
  if (write(pipefd[1], &code, 1) != 1) {
    // Already reported ready, or the parent is gone.
  }
  return rc;
}
