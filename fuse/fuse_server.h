// FuseServer: the libfuse 3 low-level adapter over core::FileSystem.
//
// It owns the inode table (inode <-> path, with the kernel's lookup counts:
// they change only in lookup/readdirplus and forget), translates core
// results to FUSE replies (ToErrno, reply_error.h, is the one mapping out of
// Status for the mount) and answers every request exactly once (the
// callbacks: ops.h). Caching, deadlines and failover happen below, in core;
// the one policy decided here is the open policy, the kernel's side of an
// open (passthrough, no-open), which OpenPolicy decides and this applies.
//
// The mount is read-only ("ro"): the kernel refuses writes with EROFS, and
// every write-shaped operation that still reaches us gets EROFS too. Files
// are immutable, so entries and attributes get long kernel timeouts and
// opens set keep_cache (a second epoch reads from the page cache), except
// files with a freshness lifetime (Cache-Control no-cache/max-age): their
// timeouts are at most that lifetime and their opens drop the page cache, so
// the kernel asks again within it and drops the pages of a changed file
// (auto_inval_data, on a new modification time or size).
//
// A read that must wait for a fetch does not hold a worker: it is answered
// by the thread that completes it (PendingReplies bounds the wait), or, for a
// large reply, by one of two reply threads.
//
// The mount can be handed to another perchd without unmounting (issue 31):
// PauseReading/EndForHandoff stop the loop with no request lost, Detach
// yields the kernel-facing state (SessionState) and the /dev/fuse
// descriptor, Adopt serves them in the next process.
//
// Thread-safety: FUSE callbacks run on libfuse's worker threads. The inode
// table and the open policy have their own locks; mu_ guards the open files
// and directories. All three are leaf locks, never held across a FileSystem
// call or a fuse_reply_*. An open directory's own lock (DirHandle::mu) is
// held while one READDIR of it is answered, the listing of a handed-over
// directory included; it is taken before the inode table's. Exceptions
// never cross into libfuse: each callback catches everything and answers EIO.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/core/filesystem.h"
#include "daemon/core/metrics.h"
#include "daemon/core/mutex.h"
#include "fuse/inode_table.h"
#include "fuse/open_policy.h"
#include "fuse/passthrough.h"
#include "fuse/pending_replies.h"
#include "fuse/session_state.h"
#include "fuse/stale_inodes.h"

struct fuse_lowlevel_ops;
struct fuse_session;

namespace perch::fuse {

struct ReplyPool;

struct FuseOptions {
  double entry_timeout = 3600;   // seconds the kernel may cache a name -> inode
  double attr_timeout = 3600;    // ... and attributes
  double negative_timeout = 30;  // ... and a missing name
  unsigned max_threads = 32;
  bool clone_fd = true;
  // Let the kernel open files without asking us (FUSE no-open, when offered):
  // two fewer requests per file read, page cache kept across opens.
  bool no_open = true;
  // Let the kernel read a complete cached object of at least a block
  // straight from the cache's file (FUSE passthrough: Linux 6.9+, perchd as
  // root): no READ request, no copy through perchd, the page cache and
  // read-ahead of that file. Used when the kernel offers it. It needs opens
  // answered (to say, per open, which files pass through), which costs small
  // files two requests each. With no_open too, the mount decides once: after
  // `decide_after` opens, if fewer than 1 in 100 were of objects a block or
  // larger (a small-file workload), no file starts passing through, and once
  // none is open in passthrough it answers no more opens (no-open from then
  // on); else it keeps answering them.
  bool passthrough = true;
  uint32_t decide_after = 256;
  uint32_t max_io = 1 << 20;  // largest read request (kernel max_pages permitting)
  // The kernel's read-ahead for the mount (its bdi's read_ahead_kb), set as
  // root once the mount serves; 0 keeps the kernel's default (128 KiB).
  uint64_t read_ahead = 1 << 20;
  // Read-ahead requests the kernel keeps in flight before it skips the
  // asynchronous part of a read-ahead (congestion at 3/4 of this): the
  // default of 12 makes many readers of a slow (cold) mount fall back to
  // small synchronous reads.
  unsigned max_background = 64;
  std::string fsname = "perch";
  // Fills statfs answers (capacity and use of the block cache).
  std::function<void(struct statvfs*)> statfs;
  // Extended attributes of an open or looked-up path: name -> value.
  std::function<std::map<std::string, std::string>(const core::ObjectPath&, const core::FileAttr&)>
      xattrs;
  // One extended attribute by name (getxattr), when it may cost a request
  // (an object's digest); kNotFound is ENODATA. Unset: looked up in xattrs.
  std::function<core::Result<std::string>(const core::ObjectPath&, const core::FileAttr&,
                                          std::string_view name)>
      xattr;
  // Who may read what a namespace that requires a token holds: files and
  // directories with FileAttr::restricted are owned by root and this group,
  // mode 0440/0550 (-1: root only, 0400/0500). The kernel enforces it
  // (default_permissions); everything else is 0444/0555 for every user.
  int restricted_gid = -1;
  // Where operation latencies and errors are counted (may be null).
  core::OpMetrics* metrics = nullptr;
};

class FuseServer {
 public:
  FuseServer(core::FileSystem& fs, FuseOptions options);
  ~FuseServer();
  FuseServer(const FuseServer&) = delete;
  FuseServer& operator=(const FuseServer&) = delete;

  // Creates the session and mounts it read-only at `mountpoint`. A clear
  // error (missing mountpoint, no /dev/fuse, permission) otherwise.
  core::Status Mount(const std::string& mountpoint);
  // Serves until unmounted or Exit(); installs SIGINT/SIGTERM/SIGHUP handlers
  // that end the loop. Returns when the loop ends.
  core::Status Run();
  // Ends the loop (safe from any thread).
  void Exit();
  // Unmounts (idempotent).
  void Unmount();

  // True between a successful Mount and Unmount.
  bool mounted() const { return mounted_; }

  // Handing the mount to the next perchd (issue 31), in three steps:
  // PauseReading stops the workers from reading requests (each finishes the
  // one it holds; later requests wait in the kernel); false if some still
  // processed one at `deadline`. Then either ResumeReading (called off) or
  // EndForHandoff, after which Run returns. Then Detach.
  bool PauseReading(std::chrono::steady_clock::time_point deadline);
  void ResumeReading();
  void EndForHandoff();
  // After Run returned from EndForHandoff: waits (up to `deadline`) for the
  // reads answered later (PendingReplies), then yields the state the kernel
  // relies on and a duplicate of the /dev/fuse descriptor, which the caller
  // owns. The mount stays: this server no longer unmounts it.
  core::Result<SessionState> Detach(std::chrono::steady_clock::time_point deadline, int* fd);
  // Instead of Mount: serves the mount at `mountpoint` over `fd` (another
  // perchd's /dev/fuse descriptor, detached with `state`), which this server
  // now owns. Requests the kernel queued meanwhile are answered once Run
  // starts.
  core::Status Adopt(int fd, const std::string& mountpoint, const SessionState& state);
  // Never unmounts: the mount stays another perchd's (a takeover called off).
  void Abandon() { mounted_ = false; }

  // Where operation `op` is timed (null without options_.metrics); counts a failed operation.
  core::LatencyHistogram* LatencyOf(core::OpMetrics::Op op);
  void CountError(const core::Status& s);

  // Implementation of the callbacks (public for the C trampolines).
  struct Ops;

 private:
  friend struct Ops;
  // A directory listing taken at opendir, so offsets stay stable across calls.
  // One handed over by the previous perchd is listed again at its first read
  // (from the namespace cache, as that perchd listed it).
  struct DirHandle {
    explicit DirHandle(core::ObjectPath p) : path(std::move(p)) {}
    const core::ObjectPath path;
    // Held while a READDIR of it is answered (see Thread-safety above).
    core::Mutex mu;
    bool listed PERCH_GUARDED_BY(mu) = false;
    std::vector<core::DirEntry> entries PERCH_GUARDED_BY(mu);
  };
  // The callbacks (ops.cc).
  static const struct fuse_lowlevel_ops& LowLevelOps();
  // The session over `mountpoint` ("/dev/fd/N": an open /dev/fuse), with
  // the I/O hooks installed.
  core::Status NewSession(const std::string& mountpoint);
  // How open file `fh` of inode `ino` is served (Open: passes through?) and
  // let go (Release), as policy_ decides: read_ops.cc. `pages_wrong` is set
  // when the object's cached copy failed its digest (FileSystem::WholeFile):
  // the kernel's pages of the inode may hold its bytes and must go.
  bool OpenDirect(uint64_t ino, uint64_t fh, bool* pages_wrong);
  bool OpenDirectly(uint64_t ino, uint64_t fh, bool* pages_wrong);
  void Decide();  // policy_.Decide(), logged
  void Released(uint64_t ino, uint64_t fh);

  // Attributes as the kernel sees them; st_ino is InodeNumberOf(path).
  void FillStat(const core::ObjectPath& path, const core::FileAttr& a, struct stat* st) const;
  // The kernel's timeouts for an answer of `a`: the configured ones, cut to
  // a file's freshness lifetime (FileAttr::max_age).
  double AttrTimeout(const core::FileAttr& a) const;
  double EntryTimeout(const core::FileAttr& a) const;

  core::FileSystem& fs_;
  FuseOptions options_;  // max_io cut to what splices (constructor); constant after
  struct fuse_session* se_ = nullptr;
  std::string mountpoint_;
  std::atomic<bool> mounted_{false};
  std::atomic<bool> backing_refused_{false};  // the kernel refused a backing file (logged)
  OpenPolicy policy_;  // no-open, passthrough: what each open is (its own lock)
  // The device's I/O hooks, on every session (a handoff needs them); passthrough is
  // asked of the kernel only if options_.passthrough.
  Passthrough passthrough_;
  // Reads answered by the thread that completes them (misses); shared with
  // their callbacks, which may come after this server is gone.
  std::shared_ptr<PendingReplies> replies_;
  // Threads that copy large replies (over kInlineReplyBytes) into the kernel,
  // so that the thread completing a fetch (the net loop) does not.
  std::unique_ptr<ReplyPool> reply_pool_;
  // Inodes whose object changed at the origin: ESTALE until the kernel has
  // dropped their pages.
  std::unique_ptr<StaleInodes> stale_;
  bool handlers_ = false;
  bool adopted_ = false;   // over another perchd's descriptor: libfuse does not unmount it
  bool detached_ = false;  // handed over (Detach): the mount is another perchd's

  InodeTable inodes_;  // the kernel's node ids (its own lock)

  // A leaf lock: never held across a FileSystem call or a fuse_reply_*.
  core::Mutex mu_;
  std::unordered_map<uint64_t, uint64_t> open_files_
      PERCH_GUARDED_BY(mu_);  // fh -> inode, every open
  // Open directories by handle (the kernel's fh for them).
  std::unordered_map<uint64_t, std::shared_ptr<DirHandle>> dirs_ PERCH_GUARDED_BY(mu_);
  uint64_t next_dh_ PERCH_GUARDED_BY(mu_) = 1;
};

}  // namespace perch::fuse
