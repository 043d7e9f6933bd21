// FuseServer's life: the session made, mounted, served, paused for a
// handoff, ended and unmounted. The callbacks are in ops.cc and read_ops.cc.
#define FUSE_USE_VERSION 312
#include "fuse/fuse_server.h"

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fuse/kernel_tuning.h"
#include "fuse/reply_error.h"
#include "fuse/reply_pool.h"

namespace perch::fuse {

using core::ObjectPath;
using core::Status;

FuseServer::FuseServer(core::FileSystem& fs, FuseOptions options)
    : fs_(fs),
      options_(std::move(options)),
      policy_(options_.decide_after),
      replies_(std::make_shared<PendingReplies>([metrics = options_.metrics](fuse_req_t req) {
        ReplyError(req, "read", core::DeadlineExceededError("no answer before the deadline"),
                   metrics);
      })),
      reply_pool_(std::make_unique<ReplyPool>()),
      stale_(std::make_unique<StaleInodes>([this](uint64_t ino) {
        if (se_ == nullptr || !mounted_) return;
        int rc = fuse_lowlevel_notify_inval_inode(se_, ino, 0, 0);
        if (rc != 0 && rc != -ENOENT) {
          spdlog::warn("fuse: could not drop the kernel's pages of inode {}: {}", ino,
                       std::strerror(-rc));
        }
      })) {
  options_.max_io = LoggedSpliceableMaxIo(options_.max_io);
  // A read-ahead window that is not a multiple of the request size ends in a
  // short request (1 MiB over 1008 KiB requests: two requests per window).
  if (options_.read_ahead > options_.max_io)
    options_.read_ahead = options_.read_ahead / options_.max_io * options_.max_io;
}

FuseServer::~FuseServer() {
  replies_->Close();  // answers what still waits (and waits for the reply threads)
  reply_pool_->threads.join();
  stale_->Stop();
  Unmount();
  if (se_ == nullptr) return;
  if (detached_ && !adopted_) {
    // libfuse 3.14 frees the mountpoint it recorded at fuse_session_mount
    // only in fuse_session_unmount, which unmounts, and the mount is the
    // next perchd's now (docs/quirks.md): the session is kept, reachable,
    // for the little while this process has left (its descriptor closed).
    ::close(fuse_session_fd(se_));
    static std::mutex kept_mu;
    static std::vector<struct fuse_session*>* kept = new std::vector<struct fuse_session*>();
    std::lock_guard<std::mutex> l(kept_mu);
    kept->push_back(se_);
    return;
  }
  fuse_session_destroy(se_);
}

core::LatencyHistogram* FuseServer::LatencyOf(core::OpMetrics::Op op) {
  return options_.metrics != nullptr ? &options_.metrics->latency(op) : nullptr;
}

void FuseServer::CountError(const Status& s) {
  if (options_.metrics != nullptr) options_.metrics->errors().Count(s.code());
}

Status FuseServer::Mount(const std::string& mountpoint) {
  struct stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) {
    return core::InvalidArgumentError("mountpoint " + mountpoint + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode))
    return core::InvalidArgumentError("mountpoint " + mountpoint + " is not a directory");
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    return core::InvalidArgumentError(std::string("cannot use /dev/fuse: ") + std::strerror(errno) +
                                      " (is the fuse module loaded, and are you root?)");
  }
  if (Status s = NewSession(mountpoint); !s.ok()) return s;
  mounted_ = true;
  mountpoint_ = mountpoint;
  return Status::Ok();
}

Status FuseServer::NewSession(const std::string& mountpoint) {
  // fsname is a URL and may hold ',' (an option separator), '\\' or spaces:
  // percent-escape them, it is only a label in /proc/mounts.
  std::string fsname;
  for (unsigned char c : options_.fsname) {
    if (c == ',' || c == '\\' || c <= ' ' || c == 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      fsname += buf;
    } else {
      fsname += static_cast<char>(c);
    }
  }
  std::string opts = "ro,default_permissions,fsname=" + fsname +
                     ",subtype=perch,max_read=" + std::to_string(options_.max_io);
  if (::getuid() == 0) opts += ",allow_other";
  std::vector<std::string> argv_s = {"perchd", "-o", opts};
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  se_ = fuse_session_new(&args, &LowLevelOps(), sizeof(struct fuse_lowlevel_ops), this);
  fuse_opt_free_args(&args);  // libfuse may have copied them into its own allocation
  if (se_ == nullptr) return core::InternalError("fuse_session_new failed (see messages above)");
  if (fuse_session_mount(se_, mountpoint.c_str()) != 0) {
    return core::InvalidArgumentError("cannot mount at " + mountpoint +
                                      " (already mounted? see messages above)");
  }
  // The backing-file ioctls need CAP_SYS_ADMIN: only root asks the kernel.
  if (::geteuid() != 0) options_.passthrough = false;
  // The hooks go on every session: a handoff needs them (Passthrough).
  if (Status s = Passthrough::Install(
          se_, [](void* userdata) { return &static_cast<FuseServer*>(userdata)->passthrough_; });
      !s.ok()) {
    return core::InternalError("fuse: cannot install the device's I/O hooks: " + s.message());
  }
  return Status::Ok();
}

bool FuseServer::PauseReading(std::chrono::steady_clock::time_point deadline) {
  if (se_ == nullptr) return true;
  // A worker blocked in read(2) is woken by SIGUSR2 (perchd's handler has no
  // SA_RESTART: the read fails with EINTR, having taken no request).
  if (passthrough_.StopReading([](pthread_t t) { pthread_kill(t, SIGUSR2); }, deadline)) {
    return true;
  }
  passthrough_.ResumeReading();
  return false;
}

void FuseServer::ResumeReading() { passthrough_.ResumeReading(); }

void FuseServer::EndForHandoff() {
  if (se_ == nullptr) return;
  fuse_session_exit(se_);
  passthrough_.EndReading();
}

Status FuseServer::Run() {
  if (fuse_set_signal_handlers(se_) != 0)
    return core::InternalError("cannot install signal handlers");
  handlers_ = true;
  struct fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, options_.clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, options_.max_threads);
  if (options_.read_ahead > 0 && mounted_)
    std::thread(SetReadAhead, mountpoint_, options_.read_ahead).detach();
  int rc = fuse_session_loop_mt(se_, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_remove_signal_handlers(se_);
  handlers_ = false;
  if (rc != 0 && rc != SIGINT && rc != SIGTERM && rc != SIGHUP) {
    return core::InternalError("fuse loop ended with " + std::to_string(rc));
  }
  return Status::Ok();
}

void FuseServer::Exit() {
  if (se_ != nullptr) fuse_session_exit(se_);
}

void FuseServer::Unmount() {
  if (mounted_ && se_ != nullptr) {
    if (adopted_) {
      // libfuse did not mount it (Adopt): unmount as it would have.
      if (::geteuid() == 0) {
        ::umount2(mountpoint_.c_str(), MNT_DETACH);
      } else {
        std::string cmd = "fusermount3 -u -z -- '" + mountpoint_ + "' 2>/dev/null";
        if (std::system(cmd.c_str()) != 0) spdlog::warn("fusermount3 -u {} failed", mountpoint_);
      }
    } else {
      fuse_session_unmount(se_);
    }
    mounted_ = false;
  }
}

}  // namespace perch::fuse
