// perchd: mounts federation namespaces read-only through FUSE over one
// persistent block cache. This file only wires components together:
// configuration, the concrete adapters around core::CacheStack, one FUSE
// session per mount, signals and orderly shutdown.
#include <fcntl.h>
#include <grp.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "client/cli_exit.h"
#include "daemon/config.h"
#include "daemon/control/control_server.h"
#include "daemon/core/cache_stack.h"
#include "daemon/core/node_control.h"
#include "daemon/endpoint/http_endpoint.h"
#include "daemon/http/digest.h"
#include "daemon/http/federation_client.h"
#include "daemon/store/cache_dir_lock.h"
#include "daemon/store/file_block_store.h"
#include "daemon/store/rocksdb_index.h"
#include "fuse/fuse_server.h"
#include "fuse/mountpoint.h"
#include "fuse/session_state.h"
#include "perch/version.h"
#include "perchd/handoff.h"
#include "perchd/thread_pool_executor.h"
#include "proto/control_address.h"

#if PERCH_TCMALLOC
#include <gperftools/malloc_extension.h>
#endif

namespace perch {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitFailure = 1;

// The exit status for a Status from setting up (usage errors: 2).
int ExitFor(const core::Status& s) {
  spdlog::error("{}", s.message());
  return s.code() == core::StatusCode::kInvalidArgument ? kExitUsage : kExitFailure;
}

core::Status DiskSpace(const std::string& dir, uint64_t* total, uint64_t* free) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0)
    return core::InternalError(std::string("statvfs: ") + std::strerror(errno));
  *total = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  *free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  return core::Status::Ok();
}

// Hands the allocator's free pages back to the system: after the catalog's load and
// after the start-up walk, which free about as much as they keep (issue 14).
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
                                   ReleaseFreeMemory};
  o.scheduler = core::SchedulerOptions{cfg.max_requests_in_flight, cfg.max_bytes_in_flight, 0.75};
  o.reader.block_size = cfg.block_size;
  o.prefetch = cfg.prefetch;
  o.prefetch_options.max_window_bytes = cfg.readahead;
  o.prefetch_options.dir_max_entries = cfg.prefetch_dir_max_entries;
  o.prefetch_options.hint_window = cfg.hint_window;
  o.version_check_interval = cfg.version_check_interval;
  o.scrub.rate_bytes_per_second = cfg.scrub_rate;
  o.scrub.start_delay = cfg.scrub_start_delay;
  return o;
}

// One federation mounted: its client, its part of the stack, its FUSE session.
struct Federation {
  MountConfig cfg;
  http::FederationUrl url;
  std::unique_ptr<http::FederationClient> client;
  core::Mount* mount = nullptr;
  std::unique_ptr<fuse::FuseServer> server;
};

// Parses and checks every mount's URL and mountpoint (before anything starts).
// A mount in `inherited` is the previous perchd's, live: not checked (its
// session is adopted).
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

// Adds `f` to the stack over its own client, and checks that it can serve.
core::Status AddMount(const DaemonConfig& cfg, const std::vector<http::CurlLoop*>& loops,
                      core::CacheStack& stack, Federation& f) {
  http::FederationClientOptions client_opts;
  client_opts.token_file = f.cfg.token_file.empty() ? cfg.token_file : f.cfg.token_file;
  client_opts.namespace_token_files = f.cfg.namespace_tokens;
  client_opts.namespace_token_files.insert(cfg.namespace_tokens.begin(),
                                           cfg.namespace_tokens.end());
  client_opts.verify_digests = cfg.verify_digests;
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

// Sums the federation clients' counters and the net loops' queues (shared by the clients).
core::NetworkStats NetworkOf(const std::vector<std::unique_ptr<Federation>>& feds,
                             const std::vector<http::CurlLoop*>& loops) {
  core::NetworkStats n;
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
    n.origin_fallbacks += c.origin_fallbacks;
  }
  return n;
}

void Wake(int) {}

// A successor's connection, set by the handoff listener's thread (then
// SIGUSR1 to the main thread), taken by RunMounts.
std::atomic<int> g_handoff_conn{-1};

// Serves every mount's FUSE session on its own thread until a signal
// (SIGTERM, SIGINT, SIGHUP), until one mount is unmounted, or until a
// successor asks for the mounts (`*handoff_conn` set: the loops ended
// without a request lost, for FuseServer::Detach); then ends them all.
// REQUIRES: those signals blocked in every thread (Serve does it first).
core::Status RunMounts(std::vector<std::unique_ptr<Federation>>& feds,
                       std::chrono::milliseconds op_timeout, int* handoff_conn) {
  struct Runner {
    std::thread thread;
    std::atomic<bool> done{false};
    core::Status status;
  };
  std::vector<std::unique_ptr<Runner>> runners;
  struct sigaction wake {};
  wake.sa_handler = Wake;  // no SA_RESTART: interrupts the loop's wait
  ::sigaction(SIGUSR2, &wake, nullptr);
  for (auto& f : feds) {
    auto r = std::make_unique<Runner>();
    r->thread = std::thread([&server = *f->server, r = r.get()] {
      // libfuse's worker threads, started from this one, take its name.
      pthread_setname_np(pthread_self(), "perch-fuse");
      sigset_t usr2;
      sigemptyset(&usr2);
      sigaddset(&usr2, SIGUSR2);
      pthread_sigmask(SIG_UNBLOCK, &usr2, nullptr);
      r->status = server.Run();
      r->done = true;
      ::kill(::getpid(), SIGUSR1);  // tells the main thread
    });
    runners.push_back(std::move(r));
  }
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&stop, sig);
  int sig = 0;
  while (true) {
    sigwait(&stop, &sig);
    int conn = sig == SIGUSR1 ? g_handoff_conn.exchange(-1) : -1;
    bool ended = false;
    for (auto& r : runners) ended = ended || r->done;
    // A SIGUSR1 with neither: left pending by an earlier run (serving again
    // after a refused handoff), whose loops ended on the handoff.
    if (sig == SIGUSR1 && conn < 0 && !ended) continue;
    if (conn < 0 || ended) {
      if (conn >= 0) ::close(conn);
      break;
    }
    // A successor asks: every worker finishes the request it holds and reads
    // no other; requests wait in the kernel from now on.
    const auto deadline = std::chrono::steady_clock::now() + op_timeout + std::chrono::seconds(5);
    size_t paused = 0;
    while (paused < feds.size() && feds[paused]->server->PauseReading(deadline)) ++paused;
    if (paused < feds.size()) {
      spdlog::warn("handoff: requests still in progress after {} s; refused, serving on",
                   std::chrono::duration_cast<std::chrono::seconds>(op_timeout).count() + 5);
      for (size_t i = 0; i < paused; ++i) feds[i]->server->ResumeReading();
      ::close(conn);
      continue;
    }
    for (auto& f : feds) f->server->EndForHandoff();
    *handoff_conn = conn;
    break;
  }
  if (*handoff_conn < 0) {
    spdlog::info("{}; stopping", sig == SIGUSR1 ? "a mount ended" : strsignal(sig));
  } else {
    spdlog::info("handoff: the mounts stopped reading requests; handing them over");
  }
  // A loop ends once it sees the exit flag, which a signal to its thread makes it look at.
  for (auto& f : feds) f->server->Exit();
  for (auto& r : runners) {
    while (!r->done) {
      pthread_kill(r->thread.native_handle(), SIGUSR2);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    r->thread.join();
  }
  for (auto& r : runners) {
    if (!r->status.ok()) return r->status;
  }
  return core::Status::Ok();
}

// Mounts taken over from a perchd (or from this one, serving again after a
// refused handoff), and, for a successor, the connection to confirm on.
struct Inherited {
  std::vector<handoff::MountHandoff> mounts;  // descriptors owned here until adopted
  int conn = -1;                              // -1: nobody to confirm to
};

// Runs the daemon proper; returns the exit status. `ready` is called once the
// mounts serve (it detaches from the terminal when not in the foreground).
// After a successor asked for the mounts, `*handoff` holds its connection
// and the mounts (everything else closed) for the caller to send.
int Serve(const DaemonConfig& cfg, const std::function<void()>& ready, Inherited& inherited,
          Inherited* handoff) {
  // Signals end the daemon through RunMounts on this thread, never a handler
  // in some other thread: block them before any thread exists.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  auto feds = PrepareMounts(cfg, inherited.mounts);
  if (!feds.ok()) return ExitFor(feds.status());
  auto lock = store::CacheDirLock::Acquire(cfg.cache_dir);
  if (!lock.ok()) return ExitFor(core::InternalError(lock.status().message()));
  auto index = store::RocksDbIndex::Open((std::filesystem::path(cfg.cache_dir) / "index").string());
  if (!index.ok())
    return ExitFor(core::InternalError("cannot open the cache index: " + index.status().message()));
  store::FileBlockStore blocks(cfg.cache_dir, cfg.block_size);
  // Small files share pack files, named in the index; on ext4 a pack is
  // allocated ahead of its records by at most a 1024th of the quota.
  blocks.PackSmallObjects(**index, store::PackFiles::kDefaultMaxBytes,
                          store::PackFiles::kDefaultGrace,
                          store::PackFiles::ReserveFor(cfg.cache_size));
  // Before any block is written: which earlier blocks may skip the CRC pass.
  if (auto trust = blocks.BeginRun(); !trust.ok()) {
    return ExitFor(core::InternalError("cannot record this run in the cache directory: " +
                                       trust.status().message()));
  } else {
    spdlog::info("cache: run {}; {}", trust->run,
                 trust->inherited ? "blocks of earlier runs are trusted (clean end or same boot)"
                                  : "blocks of earlier runs get a CRC check on first read");
  }
  // The network loops: each client has a shard on every one (FederationClient), and
  // reads spread over them by path. The request budget and the connections per
  // server are shared out, so that N loops open no more than one would.
  const size_t net_threads = NetThreadsOf(cfg, std::thread::hardware_concurrency());
  http::CurlLoop::Options loop_opts;
  loop_opts.max_in_flight = (cfg.max_requests_in_flight + net_threads - 1) / net_threads;
  loop_opts.max_host_connections =
      (loop_opts.max_host_connections + static_cast<long>(net_threads) - 1) /
      static_cast<long>(net_threads);
  loop_opts.ca_file = cfg.ca_file;
  loop_opts.user_agent = "perch/0.1";
  std::vector<std::unique_ptr<http::CurlLoop>> net;
  std::vector<http::CurlLoop*> loops;
  for (size_t i = 0; i < net_threads; ++i) {
    net.push_back(std::make_unique<http::CurlLoop>(loop_opts));
    loops.push_back(net.back().get());
  }
  spdlog::info("network: {} loop{}", net_threads, net_threads == 1 ? "" : "s");
  ThreadPoolExecutor disk(2, "perch-disk");
  // Background work that may block: warm walks, listings, hints.
  ThreadPoolExecutor jobs(4, "perch-jobs");
  core::CacheStack stack(**index, blocks, disk, jobs, StackOptionsOf(cfg));
  int rc = 0;
  if (core::Status s = stack.Open([&](const core::Status& why) { return (*index)->Reset(why); });
      !s.ok()) {
    rc = ExitFor(core::InternalError(s.message()));
  }
  // The catalog's load freed as much as it kept (index blocks, keys, values).
  ReleaseFreeMemory();
  for (size_t i = 0; rc == 0 && i < feds->size(); ++i) {
    if (core::Status s = AddMount(cfg, loops, stack, *(*feds)[i]); !s.ok()) rc = ExitFor(s);
  }
  core::OpMetrics op_metrics;
  auto fopts = FuseOptionsOf(cfg, stack, op_metrics);
  if (rc == 0 && !fopts.ok()) rc = ExitFor(fopts.status());
  for (size_t i = 0; rc == 0 && i < feds->size(); ++i) {
    Federation& f = *(*feds)[i];
    fuse::FuseOptions o = *fopts;
    o.fsname = "perch:" + f.url.ToString();
    o.xattrs = [m = f.mount](const core::ObjectPath& p, const core::FileAttr& a) {
      return m->Xattrs(p, a);
    };
    o.xattr = [m = f.mount](const core::ObjectPath& p, const core::FileAttr& a,
                            std::string_view name) { return m->Xattr(p, a, name); };
    f.server = std::make_unique<fuse::FuseServer>(f.mount->fs(), o);
    f.mount->set_mounted_probe([s = f.server.get()] { return s->mounted(); });
  }

  // The control plane: perchctl over gRPC, Prometheus, warm jobs.
  core::NodeControl node(
      stack, cfg.cache_dir, op_metrics, [&feds, &loops] { return NetworkOf(*feds, loops); },
      [dir = cfg.cache_dir](uint64_t* total, uint64_t* free) {
        return DiskSpace(dir, total, free);
      });
  control::MetricsServer metrics(node);
  control::ControlServer control(node);
  if (rc == 0 && !cfg.metrics_address.empty()) {
    if (core::Status s = metrics.Start(cfg.metrics_address, cfg.metrics_allow_remote); !s.ok()) {
      rc = ExitFor(core::InvalidArgumentError(s.message()));
    }
  }
  // The HTTP endpoint: the same mounts for clients without FUSE.
  endpoint::EndpointOptions eopts;
  if (fopts.ok()) eopts.restricted_gid = fopts->restricted_gid;
  eopts.max_connections = kHttpConnections;
  eopts.max_connections_per_user = cfg.http_connections_per_user;
  eopts.request_timeout = cfg.http_request_timeout;
  endpoint::HttpEndpoint http_endpoint(stack, op_metrics, eopts);
  if (rc == 0 && !cfg.http_address.empty()) {
    if (core::Status s = http_endpoint.Start(cfg.http_address, cfg.http_allow_remote); !s.ok())
      rc = ExitFor(s);
  }
  control::ControlOptions copts;
  copts.address =
      cfg.control_address.empty() ? "unix:" + DefaultControlSocket() : cfg.control_address;
  copts.socket_group = cfg.control_group;
  copts.metrics_address = metrics.address();
  copts.http_address = http_endpoint.address();
  if (rc == 0) {
    if (core::Status s = control.Start(copts); !s.ok())
      rc = ExitFor(core::InternalError(s.message()));
  }
  handoff::Listener listener;
  if (rc == 0) {
    if (core::Status s = listener.Start(handoff::SocketPath(cfg.cache_dir),
                                        [](int conn) {
                                          if (int old = g_handoff_conn.exchange(conn); old >= 0)
                                            ::close(old);
                                          ::kill(::getpid(), SIGUSR1);
                                        });
        !s.ok()) {
      spdlog::warn("{}; this perchd cannot hand its mounts to a successor", s.message());
    }
  }
  // Until a successor confirms, the mounts it adopted are the previous perchd's.
  bool own_mounts = inherited.conn < 0;
  for (size_t i = 0; rc == 0 && i < feds->size(); ++i) {
    Federation& f = *(*feds)[i];
    handoff::MountHandoff* taken = nullptr;
    for (auto& h : inherited.mounts) {
      if (h.mountpoint == f.cfg.mountpoint && h.fd >= 0) taken = &h;
    }
    if (taken != nullptr) {
      auto state = fuse::DecodeSessionState(taken->state);
      core::Status s = state.ok()
                           ? f.server->Adopt(std::exchange(taken->fd, -1), f.cfg.mountpoint, *state)
                           : state.status();
      if (!s.ok()) {
        rc = ExitFor(
            core::InternalError("cannot take over " + f.cfg.mountpoint + ": " + s.message()));
        break;
      }
      continue;
    }
    if (core::Status s = f.server->Mount(f.cfg.mountpoint); !s.ok()) {
      rc = ExitFor(core::InvalidArgumentError(s.message()));
      break;
    }
    spdlog::info("mounted {} at {} (cache {}, {} MiB, blocks of {} KiB)", f.url.ToString(),
                 f.cfg.mountpoint, cfg.cache_dir, cfg.cache_size >> 20, cfg.block_size >> 10);
  }
  if (rc == 0 && inherited.conn >= 0) {
    // Everything is open: the previous perchd may go.
    // Under systemd (ExecReload), this process, started by the reload,
    // becomes the service's main process before the previous one exits
    // (the unit has NotifyAccess=all; systemd reads notifications before
    // it reaps a process, so it never sees its main process end).
    auto become_main = [] {
      if (std::getenv("NOTIFY_SOCKET") != nullptr) {
        sd_notifyf(0, "MAINPID=%d\nREADY=1", static_cast<int>(::getpid()));
      }
    };
    if (core::Status s = handoff::Confirm(
            inherited.conn, std::chrono::steady_clock::now() + std::chrono::seconds(30),
            become_main);
        !s.ok()) {
      rc = ExitFor(core::InternalError("takeover called off: " + s.message()));
    } else {
      own_mounts = true;
      spdlog::info("handoff: took over {} mount(s) from the previous perchd",
                   inherited.mounts.size());
    }
    ::close(inherited.conn);
    inherited.conn = -1;
  }
  if (!own_mounts) {
    // Called off: the previous perchd serves on; leave its mounts alone.
    for (auto& f : *feds) {
      if (f->server != nullptr) f->server->Abandon();
    }
  }
  int handoff_conn = -1;
  core::Status run;
  if (rc == 0) {
    ready();
    // Under systemd (Type=notify) the unit becomes active only now, with every mount serving.
    sd_notifyf(0, "READY=1\nSTATUS=serving %zu mount(s), first %s at %s", feds->size(),
               (*feds)[0]->url.ToString().c_str(), (*feds)[0]->cfg.mountpoint.c_str());
    run = RunMounts(*feds, cfg.op_timeout, &handoff_conn);
    if (handoff_conn < 0) sd_notify(0, "STOPPING=1");
  }
  if (handoff_conn >= 0) {
    // The loops ended with every request read answered or waiting for its
    // bytes: drain those, then keep each mount's descriptor and state.
    const auto deadline =
        std::chrono::steady_clock::now() + cfg.op_timeout + std::chrono::seconds(5);
    handoff->conn = handoff_conn;
    for (auto& f : *feds) {
      int fd = -1;
      auto state = f->server->Detach(deadline, &fd);
      if (!state.ok()) {
        spdlog::error("handoff: {}: {}", f->cfg.mountpoint, state.status().message());
        continue;
      }
      handoff->mounts.push_back({f->cfg.mountpoint, fd, fuse::EncodeSessionState(*state)});
    }
  }
  listener.Stop();
  control.Shutdown();  // ends warm streams (their warms are cancelled)
  metrics.Stop();
  http_endpoint.Shutdown();
  stack.StopBackground(std::chrono::seconds(2));
  for (auto& f : *feds) {
    if (f->server == nullptr || !f->server->mounted()) continue;
    spdlog::info("unmounting {}", f->cfg.mountpoint);
    f->server->Unmount();
  }
  for (http::CurlLoop* loop : loops) {
    loop->Shutdown();  // in-flight fetches end (cancelled) while the cache objects still exist
  }
  http_endpoint.Join();  // its reads have ended with the fetches
  jobs.Join();
  stack.Close();
  disk.Join();
  // Nothing writes blocks any more: make them durable and say so, so that the
  // next start trusts them without reading them all again.
  if (core::Status s = blocks.EndRun(); !s.ok()) {
    spdlog::warn("cache: no clean end recorded ({}); the next start checks every block",
                 s.message());
  }
  if (rc == 0 && !run.ok()) rc = ExitFor(core::InternalError(run.message()));
  return rc;
}

// Serves; when a successor asks for the mounts, hands them over and returns
// 0, or, if the successor fails to take them, serves them again. With
// `takeover`, first takes the mounts of the perchd serving this cache.
int ServeAndHandOver(const DaemonConfig& cfg, const std::function<void()>& ready, bool takeover) {
  Inherited inherited;
  const std::string path = handoff::SocketPath(cfg.cache_dir);
  core::Result<int> conn = core::UnavailableError("no takeover");
  if (takeover) {
    conn = handoff::Connect(path);
    if (!conn.ok()) return ExitFor(conn.status());
  } else {
    // A mountpoint still served by the perchd of this cache directory (a
    // second start, a restart that did not stop it): take it over rather
    // than fail.
    for (const MountConfig& m : MountsOf(cfg)) {
      if (fuse::PrepareMountpoint(m.mountpoint, true).code() != core::StatusCode::kUnavailable) {
        continue;
      }
      conn = handoff::Connect(path);
      if (conn.ok()) {
        spdlog::info("{} is served by the perchd of cache {}: taking its mounts over", m.mountpoint,
                     cfg.cache_dir);
      }
      break;
    }
  }
  if (conn.ok()) {
    spdlog::info("handoff: asking the perchd at {} for its mounts", path);
    // It first lets the requests in progress end (op_timeout at most).
    auto mounts = handoff::Receive(
        *conn, std::chrono::steady_clock::now() + 2 * cfg.op_timeout + std::chrono::seconds(30));
    if (!mounts.ok()) {
      ::close(*conn);
      return ExitFor(mounts.status());
    }
    inherited.mounts = *std::move(mounts);
    inherited.conn = *conn;
  }
  bool said_ready = false;
  auto ready_once = [&] {
    if (!std::exchange(said_ready, true)) ready();
  };
  while (true) {
    Inherited next;
    int rc = Serve(cfg, ready_once, inherited, &next);
    for (auto& m : inherited.mounts) {
      if (m.fd >= 0) ::close(m.fd);  // not adopted (Serve failed first)
    }
    if (inherited.conn >= 0) ::close(inherited.conn);
    if (next.conn < 0) return rc;
    // Everything is closed but the mounts' descriptors: send them.
    core::Status sent = handoff::Send(next.conn, next.mounts);
    const bool taken =
        sent.ok() &&
        handoff::AwaitReady(next.conn, std::chrono::steady_clock::now() + 2 * cfg.op_timeout +
                                           std::chrono::seconds(60));
    ::close(next.conn);
    next.conn = -1;
    if (taken) {
      for (auto& m : next.mounts) ::close(m.fd);
      spdlog::info("handoff: the next perchd serves the mounts; exiting");
      return 0;
    }
    if (!sent.ok()) spdlog::warn("{}", sent.message());
    spdlog::warn("handoff: refused; serving the mounts again");
    inherited = std::move(next);
  }
}

// Forks before any thread exists; the parent waits until the child has
// mounted (or failed) so that the exit status tells the truth.
int ServeInTheBackground(const DaemonConfig& cfg, bool takeover) {
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
  int rc = ServeAndHandOver(
      cfg,
      [&] {
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
      },
      takeover);
  char code = static_cast<char>(rc);
  if (write(pipefd[1], &code, 1) != 1) {
    // Already reported ready, or the parent is gone.
  }
  return rc;
}

}  // namespace
}  // namespace perch

int main(int argc, char** argv) {
  // Everything perchd creates (block files, the index, sockets' directories)
  // is private to it: cached paths of protected namespaces must not leak.
  ::umask(077);
#if !PERCH_TCMALLOC
  // glibc gives each thread that allocates an arena of its own, up to 8 per
  // core, and memory freed in one is not reused by another: at 1 M cached
  // objects that kept ~100 MiB more resident during a warm (issue 14). Two
  // arenas, before any thread exists; MALLOC_ARENA_MAX in the environment
  // still decides when set. (tcmalloc's thread caches share one heap.)
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
#endif
  using perch::ConfigError;
  perch::DaemonConfig cfg;
  CLI::App app{
      "perchd: mount a Pelican/OSDF federation namespace read-only, with a persistent node cache.\n"
      "Example: perchd --cache-dir /var/cache/perch --cache-size 50G "
      "osdf:///ospool/uc-shared/public /osdf"};
  app.set_version_flag("--version", std::string("perchd ") + perch::kVersion);
  std::string config_file, cache_size, block_size, op_timeout, http_request_timeout;
  app.add_option("--config", config_file, "TOML configuration file (flags override it)")
      ->check(CLI::ExistingFile);
  app.add_option("--cache-dir", cfg.cache_dir, "cache directory (block files and index)");
  app.add_option("--cache-size", cache_size, "cache quota, e.g. 50G (default 10G)");
  app.add_option("--block-size", block_size, "block size for large objects, e.g. 4M (default 4M)");
  app.add_option("--log-level", cfg.log_level, "trace, debug, info, warn, error");
  app.add_option("--ca-file", cfg.ca_file, "extra CA bundle for the federation's https servers");
  app.add_option("--token-file", cfg.token_file, "bearer token file for protected namespaces");
  std::vector<std::string> namespace_tokens;
  app.add_option("--namespace-token", namespace_tokens,
                 "/PREFIX=FILE: the token for namespaces at or below PREFIX, as [tokens] "
                 "(repeatable; the only way an opaque token is sent)")
      ->allow_extra_args(false);  // one value per --namespace-token: positionals follow
  app.add_option("--protected-group", cfg.protected_group,
                 "group that may read namespaces requiring a token (default: root only)");
  app.add_option("--op-timeout", op_timeout, "longest any filesystem request may wait, e.g. 30s");
  app.add_flag("-f,--foreground", cfg.foreground, "stay in the foreground (systemd, debugging)");
  bool takeover = false;
  app.add_flag("--takeover", takeover,
               "take the mounts over from the perchd serving the same cache directory, without "
               "unmounting (restart, upgrade)");
  std::string control_address, metrics_address, http_address;
  app.add_option("--control", control_address,
                 "control API address: unix:PATH or tcp:127.0.0.1:PORT (default unix:" +
                     perch::DefaultControlSocket() + ")");
  bool no_prefetch = false;
  app.add_flag("--no-prefetch", no_prefetch,
               "no read-ahead, directory prefetch or hints (benchmarks)");
  bool verify_digests = false;
  app.add_flag("--verify-digests", verify_digests,
               "check objects of one block against their server's digest (config verify_digests)");
  std::string scrub_rate;
  app.add_option("--scrub-rate", scrub_rate,
                 "read cached blocks again in the background at SIZE a second and drop bad ones, "
                 "e.g. 4M (default; 0 = off; config scrub_rate)");
  std::string control_group;
  app.add_option("--control-group", control_group,
                 "group owning the control socket: its members may use perchctl");
  app.add_option("--metrics", metrics_address,
                 "serve Prometheus metrics at http://IP:PORT/metrics (loopback)");
  app.add_option("--http", http_address,
                 "serve the mounts over HTTP at IP:PORT (loopback; GET, HEAD, PROPFIND)");
  bool metrics_allow_remote = false, allow_nonempty_mountpoint = false, http_allow_remote = false;
  app.add_flag("--http-allow-remote", http_allow_remote,
               "allow --http on a non-loopback address (protected namespaces stay refused)");
  size_t http_connections_per_user = 0;
  app.add_option("--http-connections-per-user", http_connections_per_user,
                 "connections to --http one user may hold at once (default 16 of 64)")
      ->check(CLI::PositiveNumber);
  app.add_option("--http-request-timeout", http_request_timeout,
                 "a request to --http must arrive whole within this, e.g. 10s (default)");
  app.add_flag("--metrics-allow-remote", metrics_allow_remote,
               "allow --metrics on a non-loopback address (the endpoint has no authentication)");
  app.add_flag("--allow-nonempty-mountpoint", allow_nonempty_mountpoint,
               "mount over a directory that has entries (they are hidden while mounted)");
  std::string url, mountpoint;
  app.add_option("FEDERATION_URL", url,
                 "pelican://host/path, osdf:///path or http(s)://host:port/path");
  app.add_option("MOUNTPOINT", mountpoint, "an existing empty directory");
  if (auto rc = perch::cli::Parse(app, argc, argv)) return *rc;
  try {
    if (!config_file.empty()) perch::ApplyConfigFile(config_file, &cfg);
    if (!url.empty() || !mountpoint.empty()) {
      cfg.mounts.clear();  // the arguments name the one mount
      cfg.federation_url = url;
      cfg.mountpoint = mountpoint;
    }
    for (const std::string& t : namespace_tokens)
      perch::AddNamespaceTokenFlag(t, &cfg.namespace_tokens);
    if (!cache_size.empty()) cfg.cache_size = perch::ParseSize(cache_size, "--cache-size");
    if (!block_size.empty()) cfg.block_size = perch::ParseSize(block_size, "--block-size");
    if (!control_address.empty()) cfg.control_address = control_address;
    if (no_prefetch) cfg.prefetch = false;
    if (verify_digests) cfg.verify_digests = true;
    if (!scrub_rate.empty()) cfg.scrub_rate = perch::ParseSize(scrub_rate, "--scrub-rate");
    if (!metrics_address.empty()) cfg.metrics_address = metrics_address;
    if (!control_group.empty()) cfg.control_group = control_group;
    if (metrics_allow_remote) cfg.metrics_allow_remote = true;
    if (!http_address.empty()) cfg.http_address = http_address;
    if (http_allow_remote) cfg.http_allow_remote = true;
    if (http_connections_per_user != 0) cfg.http_connections_per_user = http_connections_per_user;
    if (!http_request_timeout.empty()) {
      cfg.http_request_timeout =
          perch::ParseDuration(http_request_timeout, "--http-request-timeout");
    }
    if (allow_nonempty_mountpoint) cfg.allow_nonempty_mountpoint = true;
    if (!op_timeout.empty()) cfg.op_timeout = perch::ParseDuration(op_timeout, "--op-timeout");
    if (perch::MountsOf(cfg).empty()) {
      throw ConfigError(
          "FEDERATION_URL and MOUNTPOINT (or [[mount]] tables in --config) are required (see "
          "--help)");
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
    return perch::ServeAndHandOver(
        cfg, [] {}, takeover);
  }
  return perch::ServeInTheBackground(cfg, takeover);
}
