#include "perchd/serve.h"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

#include "daemon/control/control_server.h"
#include "daemon/endpoint/http_endpoint.h"
#include "daemon/store/cache_dir_lock.h"
#include "daemon/store/file_block_store.h"
#include "daemon/store/rocksdb_index.h"
#include "fuse/mountpoint.h"
#include "fuse/session_state.h"
#include "perchd/handoff.h"
#include "perchd/signals.h"
#include "perchd/stack.h"
#include "perchd/thread_pool_executor.h"
#include "proto/control_address.h"

namespace perch {
namespace {

// Mounts taken over from a perchd (or from this one, serving again after a
// refused handoff), and, for a successor, the connection to confirm on.
struct Inherited {
  std::vector<handoff::MountHandoff> mounts;     // descriptors owned here until adopted
  std::vector<handoff::MountHandoff> listeners;  // listening sockets (handoff::IsListener)
  int conn = -1;                                 // -1: nobody to confirm to

  // The listening socket handed over for side server `name` where it
  // listened on `address` (taken: the caller's), else -1.
  int TakeListener(std::string_view name, const std::string& address) {
    for (auto& l : listeners) {
      if (l.fd >= 0 && l.mountpoint.substr(handoff::kListenerPrefix.size()) == name &&
          l.state == address) {
        return std::exchange(l.fd, -1);
      }
    }
    return -1;
  }
  void CloseAll() {
    for (auto* v : {&mounts, &listeners}) {
      for (auto& m : *v) {
        if (m.fd >= 0) ::close(std::exchange(m.fd, -1));  // not adopted (Serve failed first)
      }
    }
    if (conn >= 0) ::close(std::exchange(conn, -1));
  }
};

// A side server's listener that could not be had. With mounts inherited (a
// takeover, or serving again after a refused one) it never drops them: the
// mounts serve without it, the log and `perchctl health` say so. At a first
// start it is the configuration's error and perchd stops.
core::Status SideListenerFailed(const core::Status& why, bool have_mounts,
                                core::NodeControl& node) {
  if (!have_mounts) return why;
  spdlog::error("{}; serving the mounts without it", why.message());
  node.NoteListenerProblem(why.message());
  return core::Status::Ok();
}

// Mounts every federation at its mountpoint, or adopts the session the
// previous perchd handed over for it.
core::Status MountAll(const DaemonConfig& cfg, std::vector<std::unique_ptr<Federation>>& feds,
                      Inherited& inherited) {
  for (auto& fed : feds) {
    Federation& f = *fed;
    handoff::MountHandoff* taken = nullptr;
    for (auto& h : inherited.mounts) {
      if (h.mountpoint == f.cfg.mountpoint && h.fd >= 0) taken = &h;
    }
    if (taken != nullptr) {
      auto state = fuse::DecodeSessionState(taken->state);
      core::Status s = state.ok()
                           ? f.server->Adopt(std::exchange(taken->fd, -1), f.cfg.mountpoint, *state)
                           : state.status();
      if (!s.ok()) return s.WithContext("cannot take over " + f.cfg.mountpoint);
      continue;
    }
    if (core::Status s = f.server->Mount(f.cfg.mountpoint); !s.ok()) return s;
    spdlog::info("mounted {} at {} (cache {}, {} MiB, blocks of {} KiB)", f.url.ToString(),
                 f.cfg.mountpoint, cfg.cache_dir, cfg.cache_size >> 20, cfg.block_size >> 10);
  }
  return core::Status::Ok();
}

// Everything is open: tells the previous perchd that it may go.
core::Status ConfirmTakeover(Inherited& inherited) {
  // Under systemd (ExecReload), this process, started by the reload,
  // becomes the service's main process before the previous one exits
  // (the unit has NotifyAccess=all; systemd reads notifications before
  // it reaps a process, so it never sees its main process end).
  auto become_main = [] {
    if (std::getenv("NOTIFY_SOCKET") != nullptr) {
      sd_notifyf(0, "MAINPID=%d\nREADY=1", static_cast<int>(::getpid()));
    }
  };
  core::Status s = handoff::Confirm(
      inherited.conn, std::chrono::steady_clock::now() + std::chrono::seconds(30), become_main);
  ::close(inherited.conn);
  inherited.conn = -1;
  if (!s.ok()) return s.WithContext("takeover called off");
  spdlog::info("handoff: took over {} mount(s) from the previous perchd", inherited.mounts.size());
  return core::Status::Ok();
}

// The loops ended with every request read answered or waiting for its
// bytes: drains those, then keeps each mount's descriptor and state.
void DetachForHandoff(const DaemonConfig& cfg, std::vector<std::unique_ptr<Federation>>& feds,
                      Inherited* handoff) {
  const auto deadline = std::chrono::steady_clock::now() + cfg.op_timeout + std::chrono::seconds(5);
  for (auto& f : feds) {
    int fd = -1;
    auto state = f->server->Detach(deadline, &fd);
    if (!state.ok()) {
      spdlog::error("handoff: {}: {}", f->cfg.mountpoint, state.status().message());
      continue;
    }
    handoff->mounts.push_back({f->cfg.mountpoint, fd, fuse::EncodeSessionState(*state)});
  }
}

// A copy of side server `name`'s listening socket for the successor, taken
// before this perchd closes its own: the port never goes free.
void KeepListener(std::string_view name, const std::string& address, int dup, Inherited* handoff) {
  if (dup < 0) return;
  handoff->listeners.push_back(
      {std::string(handoff::kListenerPrefix) + std::string(name), dup, address});
}

// Runs the daemon proper. `ready` is called once the mounts serve (it
// detaches from the terminal when not in the foreground). After a successor
// asked for the mounts, `*handoff` holds its connection and the mounts
// (everything else closed) for the caller to send.
core::Status Serve(const DaemonConfig& cfg, const std::function<void()>& ready,
                   Inherited& inherited, HandoffRequests& requests, Inherited* handoff) {
  // Signals end the daemon through RunMounts on this thread, never a handler
  // in some other thread: block them before any thread exists.
  BlockSignals();
  auto feds = PrepareMounts(cfg, inherited.mounts);
  if (!feds.ok()) return feds.status();
  auto lock = store::CacheDirLock::Acquire(cfg.cache_dir);
  if (!lock.ok()) return lock.status();
  auto index = store::RocksDbIndex::Open((std::filesystem::path(cfg.cache_dir) / "index").string());
  if (!index.ok()) return index.status().WithContext("cannot open the cache index");
  store::FileBlockStore blocks(cfg.cache_dir, cfg.block_size);
  // Small files share pack files, named in the index; on ext4 a pack is
  // allocated ahead of its records by at most a 1024th of the quota.
  blocks.PackSmallObjects(**index, store::PackFiles::kDefaultMaxBytes,
                          store::PackFiles::kDefaultGrace,
                          store::PackFiles::ReserveFor(cfg.cache_size));
  std::vector<std::unique_ptr<http::CurlLoop>> net = NetLoopsOf(cfg);
  std::vector<http::CurlLoop*> loops;
  for (auto& loop : net) loops.push_back(loop.get());
  ThreadPoolExecutor disk(2, "perch-disk");
  // Background work that may block: warm walks, listings, hints.
  ThreadPoolExecutor jobs(4, "perch-jobs");
  core::CacheStack stack(**index, blocks, disk, jobs, StackOptionsOf(cfg));
  // The first failure; each step below runs only while there is none, and
  // everything made is taken down in order at the end.
  core::Status failed = stack.Open([&](const core::Status& why) { return (*index)->Reset(why); });
  // The catalog's load freed as much as it kept (index blocks, keys, values).
  ReleaseFreeMemory();
  for (size_t i = 0; failed.ok() && i < feds->size(); ++i) {
    failed = AddMount(cfg, loops, stack, *(*feds)[i]);
  }
  core::OpMetrics op_metrics;
  auto fopts = FuseOptionsOf(cfg, stack, op_metrics);
  if (failed.ok() && !fopts.ok()) failed = fopts.status();
  for (size_t i = 0; failed.ok() && i < feds->size(); ++i) AddFuseServer(*fopts, *(*feds)[i]);

  // The control plane: perchctl over gRPC, Prometheus, warm jobs.
  core::NodeControl node(
      stack, cfg.cache_dir, op_metrics, [&feds, &loops] { return NetworkOf(*feds, loops); },
      [dir = cfg.cache_dir](uint64_t* total, uint64_t* free) {
        return DiskSpace(dir, total, free);
      });
  control::MetricsServer metrics(node);
  control::ControlServer control(node);
  const bool have_mounts = !inherited.mounts.empty();
  if (failed.ok() && !cfg.metrics_address.empty()) {
    core::Status s = metrics.Start(cfg.metrics_address, cfg.metrics_allow_remote,
                                   inherited.TakeListener("metrics", cfg.metrics_address));
    if (!s.ok()) failed = SideListenerFailed(s, have_mounts, node);
  }
  // The HTTP endpoint: the same mounts for clients without FUSE.
  endpoint::EndpointOptions eopts;
  if (fopts.ok()) eopts.restricted_gid = fopts->restricted_gid;
  eopts.max_connections = kHttpConnections;
  eopts.max_connections_per_user = cfg.http_connections_per_user;
  eopts.request_timeout = cfg.http_request_timeout;
  endpoint::HttpEndpoint http_endpoint(stack, op_metrics, eopts);
  if (failed.ok() && !cfg.http_address.empty()) {
    core::Status s = http_endpoint.Start(cfg.http_address, cfg.http_allow_remote,
                                         inherited.TakeListener("http", cfg.http_address));
    if (!s.ok()) failed = SideListenerFailed(s, have_mounts, node);
  }
  control::ControlOptions copts;
  copts.address =
      cfg.control_address.empty() ? "unix:" + DefaultControlSocket() : cfg.control_address;
  copts.socket_group = cfg.control_group;
  copts.metrics_address = metrics.address();
  copts.http_address = http_endpoint.address();
  if (failed.ok()) {
    // A control socket on TCP loopback is a side listener too (a unix one
    // lies in a directory of root's: nobody else can take its name).
    core::Status s = control.Start(copts);
    if (!s.ok()) {
      failed = copts.address.starts_with("unix:") ? s : SideListenerFailed(s, have_mounts, node);
    }
  }
  handoff::Listener listener;
  if (failed.ok()) {
    if (core::Status s = listener.Start(handoff::SocketPath(cfg.cache_dir),
                                        [&requests](int conn) { requests.Offer(conn); });
        !s.ok()) {
      spdlog::warn("{}; this perchd cannot hand its mounts to a successor", s.message());
    }
  }
  // Until a successor confirms, the mounts it adopted are the previous perchd's.
  bool own_mounts = inherited.conn < 0;
  if (failed.ok()) failed = MountAll(cfg, *feds, inherited);
  if (failed.ok() && inherited.conn >= 0) {
    failed = ConfirmTakeover(inherited);
    own_mounts = failed.ok();
  }
  if (!own_mounts) {
    // Called off: the previous perchd serves on; leave its mounts alone.
    for (auto& f : *feds) {
      if (f->server != nullptr) f->server->Abandon();
    }
  }
  int handoff_conn = -1;
  if (failed.ok()) {
    ready();
    // Under systemd (Type=notify) the unit becomes active only now, with every mount serving.
    sd_notifyf(0, "READY=1\nSTATUS=serving %zu mount(s), first %s at %s", feds->size(),
               (*feds)[0]->url.ToString().c_str(), (*feds)[0]->cfg.mountpoint.c_str());
    failed = RunMounts(*feds, cfg.op_timeout, requests, &handoff_conn);
    if (handoff_conn < 0) sd_notify(0, "STOPPING=1");
  }
  if (handoff_conn >= 0) {
    handoff->conn = handoff_conn;
    DetachForHandoff(cfg, *feds, handoff);
    KeepListener("metrics", cfg.metrics_address, metrics.DupListener(), handoff);
    KeepListener("http", cfg.http_address, http_endpoint.DupListener(), handoff);
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
  // In-flight fetches end (cancelled) while the cache objects still exist, and so does any a
  // job still running asks for: the job pool ends now, not when a job's listing or lookup
  // times out (30 s, which held a handoff's waiting requests that long).
  for (http::CurlLoop* loop : loops) loop->StopTransfers();
  http_endpoint.Join();  // its reads have ended with the fetches
  jobs.Join();
  for (http::CurlLoop* loop : loops) loop->Shutdown();
  stack.Close();
  disk.Join();
  return failed;
}

// Takes the mounts of the perchd that serves this cache directory: with
// `takeover`, or when a mountpoint is still served by it (a second start, a
// restart that did not stop it). Nothing to take: an empty Inherited.
core::Result<Inherited> TakeMountsOver(const DaemonConfig& cfg, bool takeover) {
  const std::string path = handoff::SocketPath(cfg.cache_dir);
  core::Result<int> conn = core::UnavailableError("no takeover");
  if (takeover) {
    conn = handoff::Connect(path);
    if (!conn.ok()) return conn.status();
  } else {
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
  Inherited inherited;
  if (!conn.ok()) return inherited;
  spdlog::info("handoff: asking the perchd at {} for its mounts", path);
  // It first lets the requests in progress end (op_timeout at most).
  auto mounts = handoff::Receive(
      *conn, std::chrono::steady_clock::now() + 2 * cfg.op_timeout + std::chrono::seconds(30));
  if (!mounts.ok()) {
    ::close(*conn);
    return mounts.status();
  }
  for (handoff::MountHandoff& m : *mounts) {
    (handoff::IsListener(m) ? inherited.listeners : inherited.mounts).push_back(std::move(m));
  }
  inherited.conn = *conn;
  return inherited;
}

}  // namespace

core::Status ServeAndHandOver(const DaemonConfig& cfg, const std::function<void()>& ready,
                              bool takeover) {
  auto taken = TakeMountsOver(cfg, takeover);
  if (!taken.ok()) return taken.status();
  Inherited inherited = *std::move(taken);
  HandoffRequests requests;
  bool said_ready = false;
  auto ready_once = [&] {
    if (!std::exchange(said_ready, true)) ready();
  };
  while (true) {
    Inherited next;
    core::Status served = Serve(cfg, ready_once, inherited, requests, &next);
    inherited.CloseAll();
    if (next.conn < 0) return served;
    // Everything is closed but the mounts' descriptors and the listening
    // sockets' copies: send them.
    std::vector<handoff::MountHandoff> travelling = next.mounts;
    travelling.insert(travelling.end(), next.listeners.begin(), next.listeners.end());
    core::Status sent = handoff::Send(next.conn, travelling);
    const bool handed =
        sent.ok() &&
        handoff::AwaitReady(next.conn, std::chrono::steady_clock::now() + 2 * cfg.op_timeout +
                                           std::chrono::seconds(60));
    ::close(next.conn);
    next.conn = -1;
    if (handed) {
      next.CloseAll();
      spdlog::info("handoff: the next perchd serves the mounts; exiting");
      return core::Status::Ok();
    }
    if (!sent.ok()) spdlog::warn("{}", sent.message());
    spdlog::warn("handoff: refused; serving the mounts again");
    inherited = std::move(next);
  }
}

}  // namespace perch
