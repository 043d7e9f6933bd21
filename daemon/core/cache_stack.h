// CacheStack: the one place that builds the cache. It owns what every mount
// of a node shares (the catalog with its quota and LRU, the fetch scheduler
// and its budget, the flush timer) and hands out a Mount, with its own
// namespace cache, block reader, prefetcher, filesystem and warmer, per
// federation mounted. perchd and the core tests build through it alone.
//
// Mounts share one Index and one BlockStore. Blocks never collide (an object
// id names its federation, ObjectIdFor); everything keyed by path does, so
// each mount has a tag ("fed-" and 16 hex digits of a hash of its federation
// URL, stable across restarts) that prefixes its persisted namespace entries
// and the paths the catalog keeps for its objects and pins ("catalog paths").
// A Mount translates between its object paths and catalog paths.
//
// Policy that belongs to the cache and not to its adapters lives here too:
// the prefetch caps (an eighth of the effective quota), statfs figures, the
// extended attributes a file shows, whether a mount may start offline, and
// the order of shutdown.
//
// Thread-safety: AddMount and Open run before serving, on one thread; the
// rest is safe from any thread. Mounts live as long as the stack.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "daemon/core/block_reader.h"
#include "daemon/core/cache_catalog.h"
#include "daemon/core/digest_keeper.h"
#include "daemon/core/fetch_scheduler.h"
#include "daemon/core/filesystem.h"
#include "daemon/core/mutex.h"
#include "daemon/core/namespace_cache.h"
#include "daemon/core/prefetcher.h"
#include "daemon/core/scrubber.h"
#include "daemon/core/version_guard.h"
#include "daemon/core/warmer.h"

namespace perch::core {

struct StackOptions {
  CatalogOptions catalog;
  SchedulerOptions scheduler;
  BlockReaderOptions reader;
  bool prefetch = true;  // a Prefetcher per mount (read-ahead, directory prefetch, hints)
  // Its options; max_window_bytes and dir_max_bytes are capped to an eighth
  // of the effective quota.
  PrefetchOptions prefetch_options;
  WarmerOptions warmer;
  // A partly cached object's version is confirmed with the origin before
  // more of it is fetched once its last confirmation is this old
  // (VersionGuard); 0: before every such fetch.
  std::chrono::milliseconds version_check_interval{5000};
  // The scrub (background and verify jobs); block_size and path_name are set
  // by the stack. `digests` (may be null) outlives the stack.
  ScrubOptions scrub;
  ObjectDigests* digests = nullptr;
  // Computes the digests perch hands out (DigestKeeper); empty: none.
  DigestHasherFactory digest_hasher;
  // Checks an object of more than one block against its server's digest
  // once the cache holds all of it, before a reader's last read is answered
  // and before the kernel is handed its file (Mount::VerifyComplete).
  bool verify_complete_objects = false;
  DigestKeeperOptions digest_keeper;
  // Access times reach the index (and the free space is re-read) this often;
  // zero: no timer (tests call Flush themselves).
  std::chrono::milliseconds flush_period{5000};
};

struct MountSpec {
  std::string federation_id;     // the federation URL as users see it (pelican://host/prefix)
  ObjectPath federation_prefix;  // the mounted path in the federation
  // The federation itself (its discovery URL; "" = federation_id): mounts of
  // one federation see the same federation paths, mounts of two do not.
  std::string federation;
  Origin* origin = nullptr;  // the federation; outlives the stack
  std::string mountpoint;    // where users see it ("" in tests)
  NamespaceOptions names;    // key_prefix is set by AddMount
  std::chrono::milliseconds op_timeout = kDefaultOpTimeout;
  FileSystemOptions fs;  // op_timeout and federation_id are set by AddMount
  // The federation path a URL names (osdf:///ns/x -> /ns/x); an error when
  // malformed or of another federation. May be empty (URLs refused).
  std::function<Result<std::string>(std::string_view url)> path_of_url;
  // A path below the mount as its federation URL writes it (percent-encoded:
  // user.perch.url). Empty: the path as it is.
  std::function<std::string(const ObjectPath& path)> encode_path;
  // The server that last answered for a path (an xattr); may be empty.
  std::function<std::string(const ObjectPath&)> last_server;
  // Takes over the namespace entries a perch from before mount tags wrote
  // (one mount, untagged keys): set it when this is the node's only mount.
  bool adopt_untagged_entries = false;
};

// One federation mounted: the per-mount parts over the stack's shared ones.
class Mount {
 public:
  ~Mount();
  const MountSpec& spec() const { return spec_; }
  const std::string& tag() const { return tag_; }
  NamespaceCache& names() { return *names_; }
  BlockReader& reader() { return *reader_; }
  const BlockReader& reader() const { return *reader_; }
  FileSystem& fs() { return *fs_; }
  Warmer& warmer() { return *warmer_; }
  const Warmer& warmer() const { return *warmer_; }
  const VersionGuard& guard() const { return *guard_; }
  Prefetcher* prefetcher() { return prefetcher_.get(); }  // null with prefetch off
  const Prefetcher* prefetcher() const { return prefetcher_.get(); }
  bool offline() const { return names_->offline(); }

  // Catalog paths of this mount ("/<tag>" + object path) and back.
  ObjectPath CatalogPath(const ObjectPath& p) const;
  // The object path of a catalog path of this mount; nullopt if not its.
  std::optional<ObjectPath> FromCatalogPath(const ObjectPath& p) const;
  // The path users see for object path `p`: the federation path.
  std::string FederationPath(const ObjectPath& p) const;

  // The catalog, by this mount's object paths.
  std::vector<CachedObject> List(const ObjectPath& prefix, const std::string& after,
                                 size_t limit) const;
  Result<EvictResult> Evict(const ObjectPath& prefix);
  Status Pin(const ObjectPath& prefix);
  Status Unpin(const ObjectPath& prefix);
  std::vector<ObjectPath> Pins() const;

  // The extended attributes a file or directory shows (user.perch.*), with
  // the digests already known (user.perch.digest.<algorithm>); no request.
  std::map<std::string, std::string> Xattrs(const ObjectPath& p, const FileAttr& a);
  // One of them by name. A digest's name (kDigestXattrPrefix + an algorithm
  // of DigestAlgorithms()) asks for the object's digests (Digests) when they
  // are not known yet. kNotFound when there is no such attribute (ENODATA),
  // the Digests error otherwise.
  static constexpr char kDigestXattrPrefix[] = "user.perch.digest.";
  // What is known of a file's copy, without a request: the digest its bytes
  // matched ("adler32=1e720467"), "unverified: <why>" or "mismatched: <what>".
  static constexpr char kVerdictXattr[] = "user.perch.digest";
  Result<std::string> Xattr(const ObjectPath& p, const FileAttr& a, std::string_view name);

  // The digests of file `p` at version `a` that perch hands out
  // (DigestKeeper::Get), those of `wanted` (DigestAlgorithms() names) in that
  // order; all of them when `wanted` is empty.
  Result<std::vector<ObjectDigest>> Digests(const ObjectPath& p, const FileAttr& a,
                                            const std::vector<std::string>& wanted = {});

  // With StackOptions::verify_complete_objects: checks the cached copy of
  // file `p` at version `a` (object `object_id`) against its server's digest
  // when it is an object of more than one block held whole, once per version
  // (DigestKeeper::Get with OnMismatch::kFail; the verdict is remembered).
  // kCorrupt when the bytes do not match: they are dropped, counted and
  // logged, and the next read fetches them again. Ok when there is nothing
  // to check against or with: checking off, an object of one block (checked
  // at its fetch), an object not all cached, or no server but its senders
  // stating a digest (counted as unverified, remembered for this copy), or
  // the federation not answering at all (offline, its director down). No
  // answer by `deadline` while the federation answers is that error: never
  // served unchecked.
  Status VerifyComplete(const ObjectPath& p, const FileAttr& a, const std::string& object_id,
                        Deadline deadline);

  // False when VerifyComplete would return Ok at once (nothing to check).
  bool NeedsCheck(const FileAttr& a, const std::string& object_id);

  // Is the federation there? Ok when the root answers as a directory, or
  // when it cannot be reached but the index holds this mount's namespace
  // (perchd then serves offline and retries in the background).
  // kInvalidArgument when the mounted path is a file; else the Origin's error.
  Status CheckRoot(std::chrono::milliseconds timeout);

  // Whether the kernel still has it mounted (set by the daemon; true if unset).
  void set_mounted_probe(std::function<bool()> probe) { mounted_ = std::move(probe); }
  bool mounted() const { return !mounted_ || mounted_(); }

 private:
  friend class CacheStack;
  class Listener;
  Mount(MountSpec spec, std::string tag, CacheCatalog& catalog, DigestKeeper& digests);

  const MountSpec spec_;
  const std::string tag_;
  // kVerdictXattr's value for object `object_id` at version `a`.
  std::string VerdictText(const FileAttr& a, const std::string& object_id);
  // A block of object `object_id` was stored: a copy of it checked before
  // is a new copy now.
  void CopyChanged(const std::string& object_id);

  CacheCatalog& catalog_;
  DigestKeeper& digests_;
  bool verify_complete_ = false;
  // The objects whose cached copy passed VerifyComplete (until a block of
  // theirs is stored again), and those being checked (true once a block of
  // theirs was stored meanwhile: the copy checked may not be the one held).
  static constexpr size_t kMaxVerifiedCopies = 65536;  // past it, one is checked again
  Mutex verified_mu_;                                  // a leaf lock
  std::unordered_set<std::string> verified_ PERCH_GUARDED_BY(verified_mu_);
  std::unordered_map<std::string, bool> verifying_ PERCH_GUARDED_BY(verified_mu_);
  std::atomic<size_t> watching_{0};  // verified_.size() + verifying_.size()
  std::atomic<bool> said_unverified_{false};
  std::unique_ptr<Listener> listener_;
  std::unique_ptr<NamespaceCache> names_;
  std::unique_ptr<VersionGuard> guard_;
  std::unique_ptr<BlockReader> reader_;
  std::unique_ptr<Prefetcher> prefetcher_;
  std::unique_ptr<FileSystem> fs_;
  std::unique_ptr<Warmer> warmer_;
  std::function<bool()> mounted_;
};

// The mount of `mounts` holding federation path `path`: the longest mounted
// federation prefix wins, the first of `mounts` among equals; `below` is set
// to `path` below that mount's root. nullptr when no mount holds it.
Mount* MostSpecificMount(const std::vector<Mount*>& mounts, const ObjectPath& path,
                         ObjectPath* below);

class CacheStack {
 public:
  // `index`, `store`, `disk` (block writes, eviction, index batches) and
  // `jobs` (warm walks, prefetch listings, control commands) outlive the stack.
  CacheStack(Index& index, BlockStore& store, Executor& disk, Executor& jobs, StackOptions options);
  ~CacheStack();
  CacheStack(const CacheStack&) = delete;
  CacheStack& operator=(const CacheStack&) = delete;

  // Loads the catalog. When that finds the index corrupt past opening,
  // `reset_index` (may be empty: the error is returned) starts a new one and
  // the load is tried once more; the background walk then re-adopts blocks.
  // Starts that walk, the flush timer and the background scrub. REQUIRES:
  // once, before serving.
  Status Open(const std::function<Status(const Status&)>& reset_index = nullptr);

  // Adds a mount of `spec.origin`. kInvalidArgument when this federation is
  // mounted already (one mount per federation URL).
  Result<Mount*> AddMount(MountSpec spec);

  // The tag of a federation URL (see the header comment).
  static std::string TagOf(const std::string& federation_id);

  CacheCatalog& catalog() { return catalog_; }
  Scrubber& scrubber() { return *scrubber_; }
  const Scrubber& scrubber() const { return *scrubber_; }
  const CacheCatalog& catalog() const { return catalog_; }
  FetchScheduler& scheduler() { return scheduler_; }
  DigestKeeper& digests() { return digests_; }
  const DigestKeeper& digests() const { return digests_; }
  const FetchScheduler& scheduler() const { return scheduler_; }
  const StackOptions& options() const { return options_; }
  std::vector<Mount*> mounts() const;
  // How many announced reads ahead of each job's reader the eviction order
  // looks (a dataset's next epoch: the files it keeps are the first ones).
  static constexpr size_t kAnnouncedHorizon = 1 << 18;
  Executor& jobs() { return jobs_; }
  // The mount whose catalog path `p` is, with its object path; nullptr if none.
  Mount* MountOfCatalogPath(const ObjectPath& p, ObjectPath* object_path) const;

  // Blocks and free blocks of `unit` bytes for statfs: the quota as capacity.
  void StatFs(uint64_t unit, uint64_t* blocks, uint64_t* free_blocks) const;

  // Stops warms, prefetch and the scrub (before unmounting); waits up to
  // `warm_timeout` for warms to let go of their fetches.
  void StopBackground(std::chrono::milliseconds warm_timeout);
  // Stops the flush timer and writes pending access times. Call after the
  // network and job executors have stopped; the disk executor must then be
  // joined before the stack is destroyed.
  void Close();

 private:
  // `o` with future_uses reading every mount's hints (unless a test set it).
  CatalogOptions WithAnnouncedReads(CatalogOptions o);
  void ScheduleFlush();
  // Moves untagged namespace entries ("na/<path>", "nl/<path>") under `tag`,
  // once: only when the untagged root entry exists.
  Status AdoptUntaggedEntries(const std::string& tag);

  Index& index_;
  BlockStore& store_;
  Executor& disk_;
  Executor& jobs_;
  const StackOptions options_;
  CacheCatalog catalog_;
  FetchScheduler scheduler_;
  DigestKeeper digests_;
  // The scrub's whole-object check against the digests digests_ verified,
  // unless the options name other ones.
  std::unique_ptr<ObjectDigests> known_digests_;
  std::unique_ptr<Scrubber> scrubber_;  // started by Open, stopped by StopBackground
  mutable Mutex mu_;                    // a leaf lock
  std::deque<std::unique_ptr<Mount>> mounts_ PERCH_GUARDED_BY(mu_);  // only grows
  std::atomic<bool> closing_{false};
};

}  // namespace perch::core
