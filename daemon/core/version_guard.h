// VersionGuard: keeps the blocks of one cached object to one version of it.
//
// An object's store id names its version (ObjectIdFor: size, modification
// time, ETag, as the namespace cache last saw them), but a block's answer
// does not: XRootD 5.5 sends neither ETag nor Last-Modified on a Range GET.
// An object replaced at the origin (at the same size) would be read as a mix
// of the blocks cached before and those fetched after. So, before a block is
// fetched, the guard confirms the object's version with the origin
// (Origin::Stat, a PROPFIND of the one path) when blocks of it are stored and
// its version was last confirmed more than `interval` ago, or never by this
// process (after a restart). Blocks fetched meanwhile share the confirmation:
// a version is asked about at most once per interval, however many blocks
// are fetched, and not at all for an object with nothing stored yet (its
// first block is fetched now, from the version the origin has now).
//
// The same version: the fetch goes on. Another version, or none: the fetch
// fails with kStale (ESTALE through the mount: the reader holds a version
// that is gone; opening the file again reads the new one), so does every
// later fetch of the old id, and `replaced` is told once, on the executor:
// the mount makes new opens see the new version and drops the old blocks.
// When the origin cannot be asked (unreachable, or no answer within half of
// what is left of the read's time, at most 5 s) the fetch goes on
// unconfirmed and the origin is not asked about that object again for
// `interval`: an offline node still reads what its caches serve, unslowed.
// An object of one block is never asked about (BlockReader: it cannot be
// mixed), so a small-file workload costs the guard nothing.
//
// What is not caught: a replacement within `interval` of the last
// confirmation, between two fetches of the same object (docs/protocol.md, "One
// version per object"). With verify_digests the digest of a whole object
// catches what reaches the store.
//
// Thread-safety: safe from any thread. `go` runs on the caller's thread (no
// check needed) or the Origin's; it must not block. mu_ is a leaf lock, never
// held across the Origin, `stored` or a callback.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "daemon/core/executor.h"
#include "daemon/core/mutex.h"
#include "daemon/core/origin.h"

namespace perch::core {

struct VersionGuardOptions {
  std::string federation_id;  // ObjectIdFor's
  // How long a confirmed version is trusted for further fetches. 0: every
  // fetch of a partly stored object asks first.
  std::chrono::milliseconds interval{5000};
  // Versions remembered at most (confirmed or gone); past it the oldest
  // confirmations are forgotten, which costs one more question each.
  size_t max_entries = 100000;
};

class VersionGuard {
 public:
  // `stored(object_id)`: whether the store holds any block of that object.
  // `replaced(path, now)`: `path` is no longer the version a reader held;
  // `now` is what the origin has instead (attributes, or kNotFound). Runs on
  // `executor`, once per old version.
  VersionGuard(Origin& origin, Executor& executor, VersionGuardOptions options,
               std::function<bool(const std::string& object_id)> stored,
               std::function<void(const ObjectPath&, const Result<FileAttr>&)> replaced);
  VersionGuard(const VersionGuard&) = delete;
  VersionGuard& operator=(const VersionGuard&) = delete;

  // Calls `go` with Ok when a block of `object_id` (object `path`) may be
  // fetched, at once unless the version must be confirmed first; kStale when
  // the origin now holds another version or none.
  void BeforeFetch(const ObjectPath& path, const std::string& object_id, Deadline deadline,
                   std::function<void(Status)> go);

  uint64_t confirmations() const { return confirmations_.load(); }  // versions asked about
  uint64_t replacements() const { return replacements_.load(); }    // versions found gone

 private:
  struct Entry {
    Clock::time_point confirmed{};  // last asked (answered or not); {} when never
    bool asking = false;
    bool gone = false;
    std::vector<std::function<void(Status)>> waiters;
  };
  void Answered(const ObjectPath& path, const std::string& object_id, Result<FileAttr> now);
  static Status Gone(const ObjectPath& path);
  // Drops confirmations (never an entry being asked about or gone) until
  // there is room for one more.
  void MakeRoom() PERCH_REQUIRES(mu_);

  // Constant after construction.
  Origin& origin_;
  Executor& executor_;
  const VersionGuardOptions options_;
  const std::function<bool(const std::string&)> stored_;
  const std::function<void(const ObjectPath&, const Result<FileAttr>&)> replaced_;

  std::atomic<uint64_t> confirmations_{0};
  std::atomic<uint64_t> replacements_{0};
  Mutex mu_;
  std::map<std::string, Entry> versions_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::core
